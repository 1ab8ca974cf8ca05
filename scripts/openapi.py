#!/usr/bin/env python3
"""Writes docs/openapi.json, the OpenAPI 3.1 document of Stratus's HTTP API, and the Swift constant
stratus-api serves it from (Sources/StratusAPI/OpenAPIDocument.swift), both from the description
below.

    python3 scripts/openapi.py            # write both files
    python3 scripts/openapi.py --check    # fail when either is stale or the document is not valid
                                          # OpenAPI 3.1 (openapi-spec-validator, from install-deps.sh)

Edit this file, not the two it writes. OpenAPIContractTests checks that the router and the
document name the same paths and methods and that GET /openapi.json serves docs/openapi.json byte
for byte; scripts/fuzz.sh sends generated requests to a live stratus-api and checks every answer
against the document.
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ROOT / "docs" / "openapi.json"
SWIFT = ROOT / "Sources" / "StratusAPI" / "OpenAPIDocument.swift"

EXT = "x-stratus-extension"
DATABASE = "/database/1/{container}/{environment}/{database}"


def ref(name):
    return {"$ref": f"#/components/schemas/{name}"}


def extension(schema, note=None):
    """Marks a key, an operation or a response as a Stratus extension of CloudKit Web Services."""
    marked = dict(schema)
    marked[EXT] = True
    if note:
        marked["description"] = note
    return marked


def obj(required=None, optional=None, description=None, extra=True):
    """An object schema; keys a client does not know are allowed unless extra is False."""
    properties = dict(required or {})
    properties.update(optional or {})
    schema = {"type": "object"}
    if description:
        schema["description"] = description
    if required:
        schema["required"] = list(required)
    schema["properties"] = properties
    if not extra:
        schema["additionalProperties"] = False
    return schema


STRING = {"type": "string"}
BOOL = {"type": "boolean"}
INTEGER = {"type": "integer"}
NAMES = {"type": "array", "items": STRING, "maxItems": 1000}
# What the server accepts as names (anything else is BAD_REQUEST naming it).
TYPE_NAME = {"type": "string", "pattern": "^([A-Za-z][A-Za-z0-9_]{0,254}|cloudkit\\.share)$"}
RECORD_NAME = {"type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f]+$",
               "description": "1 to 255 bytes, no control characters."}
ZONE_NAME = {"type": "string", "pattern": "^(_defaultZone|[A-Za-z0-9.-][A-Za-z0-9._-]{0,254})$",
             "description": "`_defaultZone`, or 1 to 255 letters, digits, '-', '_' and '.' not starting with '_'."}

# ---------------------------------------------------------------------------------------------
# Schemas

FIELD_TYPES = [
    "STRING", "INT64", "DOUBLE", "TIMESTAMP", "BYTES", "REFERENCE", "ASSET", "ASSETID", "LOCATION",
    "STRING_LIST", "INT64_LIST", "DOUBLE_LIST", "TIMESTAMP_LIST", "BYTES_LIST", "REFERENCE_LIST",
    "ASSET_LIST", "ASSETID_LIST", "LOCATION_LIST",
]
RETRYABLE = ["TRY_AGAIN_LATER", "THROTTLED", "REQUEST_RATE_LIMITED"]

SCHEMAS = {
    "Base64Token": {
        "type": "string",
        "description": "An opaque token signed by the server (sync token, database sync token or continuation "
                       "marker): standard padded base64, as Apple's. A changed token, or one of another kind, is "
                       "BAD_REQUEST.",
        "pattern": "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
        "contentEncoding": "base64",
    },
    "ZoneType": {"type": "string", "enum": ["DEFAULT_ZONE", "REGULAR_CUSTOM_ZONE"]},
    "ZoneID": obj(
        {"zoneName": ZONE_NAME},
        {
            "ownerRecordName": STRING,
            "ownerName": extension(STRING, "Accepted in requests for ownerRecordName."),
            "zoneType": {**ref("ZoneType"), "description": "Sent in every zone id the server answers; ignored in requests."},
        },
        "A zone id: `_defaultZone` is the database's default zone. Requests may leave out the owner.",
    ),
    "TypedZoneID": {
        "description": "A zone id as the server answers it in zone dictionaries: owner and type always present.",
        "allOf": [ref("ZoneID"), obj({"ownerRecordName": STRING, "zoneType": ref("ZoneType")})],
    },
    "Zone": obj(
        {"zoneID": ref("TypedZoneID"), "atomic": BOOL, "zoneType": ref("ZoneType")},
        {"syncToken": ref("Base64Token"), "deleted": {"const": False},
         "defaultTimeToLive": extension(
             {"type": "integer", "minimum": 1, "maximum": 315360000},
             "The zone's default time to live in seconds, when it has one (docs/ttl.md).")},
        "A zone dictionary. `atomic` is true for custom zones; a custom zone's `syncToken` is its current state; "
        "the default zone has no change history (records/changes answers it with BAD_REQUEST naming records/query) "
        "and no `syncToken`.",
    ),
    "DeletedZone": obj({"zoneID": ref("ZoneID"), "deleted": {"const": True}}, description="A deleted zone."),
    "Error": {
        "type": "object",
        "description": "CloudKit's error dictionary. `uuid` is the request's id (also `X-Request-ID`); `retryAfter` "
                       "(seconds) is present on every retryable error, `redirectURL` on every AUTHENTICATION_REQUIRED.",
        "required": ["uuid", "serverErrorCode", "reason"],
        "properties": {
            "uuid": STRING,
            "serverErrorCode": {
                "type": "string",
                "description": "ACCESS_DENIED, ATOMIC_ERROR, AUTHENTICATION_FAILED, AUTHENTICATION_REQUIRED, "
                               "BAD_REQUEST, CONFLICT, EXISTS, INTERNAL_ERROR, NOT_FOUND, QUOTA_EXCEEDED, THROTTLED, "
                               "REQUEST_RATE_LIMITED, TRY_AGAIN_LATER, VALIDATING_REFERENCE_ERROR, ZONE_NOT_FOUND, "
                               "and Stratus's LIMIT_EXCEEDED and CHANGE_TOKEN_EXPIRED.",
            },
            "reason": STRING,
            "retryAfter": {"type": "integer", "minimum": 0},
            "redirectURL": STRING,
        },
        "allOf": [
            {
                "if": {"properties": {"serverErrorCode": {"enum": RETRYABLE}}, "required": ["serverErrorCode"]},
                "then": {"required": ["retryAfter"]},
            },
            {
                "if": {"properties": {"serverErrorCode": {"const": "AUTHENTICATION_REQUIRED"}}, "required": ["serverErrorCode"]},
                "then": {"required": ["redirectURL"]},
            },
        ],
    },
    "RecordError": {
        "description": "A record's error inside `records`: EXISTS, CONFLICT (with `serverRecord`), NOT_FOUND, "
                       "ACCESS_DENIED, ATOMIC_ERROR, VALIDATING_REFERENCE_ERROR, LIMIT_EXCEEDED, BAD_REQUEST, "
                       "TRY_AGAIN_LATER.",
        "allOf": [
            ref("Error"),
            obj({"recordName": STRING}, {
                "serverRecord": extension(ref("Record"), "CONFLICT only: the server's current record, for a three-way merge."),
            }),
        ],
    },
    "ZoneError": {
        "description": "A zone's error inside `zones`, naming the zone as the request did (a BAD_REQUEST entry of "
                       "changes/zone may name a zone that cannot exist).",
        "allOf": [ref("Error"), obj({"zoneID": obj({"zoneName": STRING}, {"ownerRecordName": STRING, "zoneType": ref("ZoneType")})})],
    },
    "Stamp": obj(
        {"timestamp": INTEGER, "userRecordName": STRING, "deviceID": STRING},
        description="Who wrote a record and when (ms since 1970); `deviceID` is `_stratus` for every write through "
                    "the web service.",
    ),
    "FieldType": {"type": "string", "enum": FIELD_TYPES},
    "Field": obj(
        {"value": {}, "type": ref("FieldType")},
        description="A record field as the server answers it: INT64 and DOUBLE values are strings with "
                    "`numbersAsStrings`, TIMESTAMP is ms, BYTES base64, REFERENCE `{recordName, zoneID, action}` (`zoneID` "
                    "the record's own), LOCATION `{latitude, longitude, …}`, a _LIST type an array of such values.",
    ),
    "FieldInput": obj(
        optional={"value": {}, "type": ref("FieldType")},
        description="A record field as a client sends it. Without `type` the type is inferred; `{}` or a null "
                    "`value` removes the field under update.",
    ),
    "Asset": obj(
        {"receipt": STRING, "size": INTEGER, "fileChecksum": STRING, "referenceChecksum": STRING},
        {"wrappingKey": STRING, "downloadURL": {**STRING, "description": "Signed, expires (STRATUS_ASSET_URL_TTL_SECONDS)."}},
        "CloudKit's asset dictionary: what an upload answers (`singleFile`) and an ASSETID field holds. `fileChecksum` is "
        "base64 of the bytes' SHA-256; records answer it with a `downloadURL`.",
    ),
    "Reference": obj(
        {"recordName": STRING},
        {"zoneID": ref("ZoneID"), "action": {"type": "string", "enum": ["NONE", "DELETE_SELF", "VALIDATE"]}},
        "A reference to a record of the same zone.",
    ),
    "Record": obj(
        {
            "recordName": RECORD_NAME, "recordType": TYPE_NAME, "recordChangeTag": STRING,
            "fields": {"type": "object", "propertyNames": TYPE_NAME, "additionalProperties": ref("Field")},
            "created": ref("Stamp"), "modified": ref("Stamp"),
        },
        {
            "deleted": {"const": False}, "zoneID": ref("TypedZoneID"), "parent": ref("Reference"),
            "share": ref("Reference"), "shortGUID": STRING,
            "expirationDate": extension({"type": "integer"},
                                        "When the record expires, in milliseconds since 1970 (records that expire; docs/ttl.md)."),
        },
        "A record dictionary; `fields` holds only the `desiredKeys` when they are given.",
    ),
    "DeletedRecord": obj(
        {"recordName": STRING, "deleted": {"const": True}},
        {"zoneID": ref("TypedZoneID")},
        "A deleted record: answered by delete operations (with `zoneID`) and by sync.",
    ),
    "RecordInput": obj(
        optional={
            "recordName": {**RECORD_NAME, "description": "Required except for create, which names an unnamed record."},
            "recordType": TYPE_NAME,
            "recordChangeTag": {**STRING, "description": "Required by update, replace and delete."},
            "fields": {"type": "object", "propertyNames": TYPE_NAME, "additionalProperties": ref("FieldInput")},
            "parent": {"anyOf": [ref("Reference"), {"type": "null"}]},
            "share": {"anyOf": [ref("Reference"), {"type": "null"}]},
            "createShortGUID": BOOL,
            "expirationDate": extension(
                {"type": ["integer", "null"]},
                "When the record expires, in milliseconds since 1970: at most 60 s in the past and ten years ahead; null: never. "
                "Absent: a new record never expires and a saved one keeps its own (docs/ttl.md)."),
            "timeToLive": extension(
                {"type": ["integer", "null"], "minimum": 1, "maximum": 315360000},
                "Seconds from now until the record expires (at most ten years); null: never. Not with expirationDate."),
        },
        description="A record as an operation sends it.",
    ),
    "RecordResult": {"anyOf": [ref("Record"), ref("DeletedRecord"), ref("RecordError")]},
    "RecordChange": {"anyOf": [ref("Record"), ref("DeletedRecord")]},
    "ZoneResult": {"anyOf": [ref("Zone"), ref("DeletedZone"), ref("ZoneError")]},
    "RecordsAnswer": obj({"records": {"type": "array", "items": ref("RecordResult")}}),
    "ZonesAnswer": obj({"zones": {"type": "array", "items": ref("ZoneResult")}}),
    "ZoneChangesRequest": obj(
        {"zoneID": ref("ZoneID")},
        {
            "syncToken": {**ref("Base64Token"), "description": "Absent or empty: from the start."},
            "resultsLimit": {"type": "integer", "minimum": 1, "description": "Capped by STRATUS_MAX_RESULTS (200)."},
            "desiredKeys": NAMES,
            "desiredRecordTypes": extension(NAMES, "Only records of these types (Stratus extension on records/changes)."),
            "numbersAsStrings": BOOL,
            "reverse": extension(BOOL, "Newest changes first; continue with reverse: true until moreComing is false."),
            "snapshot": extension(BOOL, "Every change in order, intermediate versions included."),
        },
        "One custom zone's changes since a token.",
    ),
    "ZoneChanges": obj(
        {
            "zoneID": ref("TypedZoneID"), "records": {"type": "array", "items": ref("RecordChange")},
            "syncToken": ref("Base64Token"), "moreComing": BOOL,
        },
        description="A page of one zone's changes; repeat with `syncToken` while `moreComing`.",
    ),
    "DatabaseChangesRequest": obj(optional={
        "syncToken": ref("Base64Token"),
        "metaSyncToken": {**ref("Base64Token"), "description": "Apple's name on zones/changes; either is read."},
        "resultsLimit": {"type": "integer", "minimum": 1},
    }),
    "DatabaseChanges": obj(
        {
            "zones": {"type": "array", "items": {"anyOf": [ref("Zone"), ref("DeletedZone")]}},
            "syncToken": ref("Base64Token"),
            "metaSyncToken": extension(ref("Base64Token"), "The same token as syncToken, under Apple's other name."),
            "moreComing": BOOL,
        },
        description="Zones created, changed or deleted since the token.",
    ),
    "Status": obj({"status": STRING}, {"checks": {"type": "object", "additionalProperties": {"enum": ["ok", "unreachable"]}}}),
}

# ---------------------------------------------------------------------------------------------
# Errors per HTTP status: which codes each status carries.

ERRORS = {
    400: (["BAD_REQUEST", "LIMIT_EXCEEDED", "ATOMIC_ERROR"],
          "BAD_REQUEST: the request does not follow the protocol (the reason names the key); LIMIT_EXCEEDED "
          "(Stratus): beyond a limit (operations, body size, record size, list lengths, query size)."),
    401: (["AUTHENTICATION_FAILED"],
          "Unknown API token, bad or expired web auth token (a password change ends them), bad signature, "
          "both schemes in one request."),
    403: (["ACCESS_DENIED"], "A signed request to a private or shared database, or another user's zones."),
    404: (["NOT_FOUND", "ZONE_NOT_FOUND"], "The zone named does not exist in this database."),
    409: (["CONFLICT", "EXISTS"], "The request conflicts with the server's state."),
    410: (["CHANGE_TOKEN_EXPIRED"],
          "Stratus: the server can no longer honour the sync token (the zone was re-created, the token is of "
          "another zone or database, or its tombstones were collected): drop the local copy and sync without a token."),
    412: (["VALIDATING_REFERENCE_ERROR"], "A VALIDATE reference's target is missing or protected."),
    413: (["QUOTA_EXCEEDED", "LIMIT_EXCEEDED"],
          "QUOTA_EXCEEDED: the user's storage quota is used up; LIMIT_EXCEEDED: an asset upload past STRATUS_MAX_ASSET_BYTES."),
    416: (["BAD_REQUEST"], "The Range starts past the asset's end (`Content-Range: bytes */size`)."),
    421: (["AUTHENTICATION_REQUIRED"], "A user is needed and none was given: sign in at `redirectURL`."),
    429: (RETRYABLE, "Rate limited: retry after `retryAfter` seconds (also the Retry-After header)."),
    500: (["INTERNAL_ERROR"],
          "Never expected: a fault of the server (details go to its log only). The fuzz pass fails on it."),
    503: (RETRYABLE,
          "A passing condition (a lock wait or statement ran out of time, the database is unreachable, or "
          "throttling): retry after `retryAfter` seconds (also the Retry-After header). A failed write stored nothing."),
}
EXTENSION_STATUSES = {410}


def error_response(status):
    codes, description = ERRORS[status]
    headers = {"X-Request-ID": {"$ref": "#/components/headers/ErrorRequestID"}}
    if status in (429, 503):
        headers["Retry-After"] = {"$ref": "#/components/headers/RetryAfter"}
    response = {
        "description": description,
        "headers": headers,
        "content": {"application/json": {"schema": {
            "allOf": [ref("Error"), {"properties": {"serverErrorCode": {"enum": codes}}}],
        }}},
    }
    if status in EXTENSION_STATUSES:
        response[EXT] = True
    return response


RESPONSES = {f"Error{status}": error_response(status) for status in ERRORS}

# ---------------------------------------------------------------------------------------------
# Operations

# Alternatives, a signed-in user first.
READ = [{"ckAPIToken": [], "ckWebAuthToken": []}, {"ckAPIToken": []}, {"serverKeyID": [], "serverDate": [], "serverSignature": []}]
WRITE = [{"ckAPIToken": [], "ckWebAuthToken": []}, {"serverKeyID": [], "serverDate": [], "serverSignature": []}]
PATH_PARAMETERS = [{"$ref": "#/components/parameters/container"}, {"$ref": "#/components/parameters/environment"},
                   {"$ref": "#/components/parameters/database"}]
# Every database operation can answer these.
DATABASE_ERRORS = [400, 401, 403, 421, 429, 500, 503]


def ok(schema, description="Success.", headers=None):
    response = {
        "description": description,
        "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}, **(headers or {})},
        "content": {"application/json": {"schema": schema}},
    }
    return response


def operation(operation_id, summary, description, tag, body, answer, errors, security, extension_note=None, answer_headers=None,
              example=None):
    responses = {"200": ok(answer, headers=answer_headers)}
    for status in sorted(errors):
        responses[str(status)] = {"$ref": f"#/components/responses/Error{status}"}
    result = {"operationId": operation_id, "tags": [tag], "summary": summary, "description": description}
    if body is not None:
        result["requestBody"] = {
            "required": True,
            "description": "JSON, whatever Content-Type the client sends.",
            "content": {"application/json": {"schema": body, **({"example": example} if example is not None else {})}},
        }
    result["security"] = security
    result["responses"] = responses
    if extension_note:
        result[EXT] = True
        result["description"] += " " + extension_note
    return result


ZONE_ID_OPTIONAL = {"zoneID": {**ref("ZoneID"), "description": "Default `_defaultZone`."}}
DESIRED = {"desiredKeys": NAMES, "numbersAsStrings": BOOL}

ZONES_MODIFY = obj({"operations": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj({
    "operationType": {"type": "string", "enum": ["create", "delete"]},
    "zone": obj({"zoneID": ref("ZoneID")}, {"defaultTimeToLive": extension(
        {"type": ["integer", "null"], "minimum": 1, "maximum": 315360000},
        "create only: seconds a record created in the zone without expirationDate or timeToLive is given to live "
        "(at most ten years); null: none. On an existing zone it changes the default for records created from then "
        "on; records already saved keep their expiration. Absent: a new zone has none, an existing one keeps its own "
        "(docs/ttl.md).")}),
})}})
ZONES_LOOKUP = obj({"zones": {"type": "array", "maxItems": 200, "items": ref("ZoneID")}})
RECORDS_MODIFY = obj(
    {"operations": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj(
        {"operationType": {"type": "string", "enum": ["create", "update", "forceUpdate", "replace", "forceReplace", "delete", "forceDelete"]},
         "record": ref("RecordInput")},
        {"desiredKeys": NAMES},
    )}},
    {**ZONE_ID_OPTIONAL, "atomic": {**BOOL, "description": "Default true in a custom zone; a default zone is never atomic."}, **DESIRED},
)
RECORDS_LOOKUP = obj(
    {"records": {"type": "array", "maxItems": 200, "items": obj({"recordName": RECORD_NAME}, {"desiredKeys": NAMES})}},
    {**ZONE_ID_OPTIONAL, **DESIRED},
)
FILTER = obj(
    {"comparator": {"type": "string", "enum": [
        "EQUALS", "NOT_EQUALS", "LESS_THAN", "LESS_THAN_OR_EQUALS", "GREATER_THAN", "GREATER_THAN_OR_EQUALS", "NEAR",
        "IN", "NOT_IN", "BEGINS_WITH", "NOT_BEGINS_WITH", "CONTAINS_ALL_TOKENS", "CONTAINS_ANY_TOKENS",
        "LIST_CONTAINS", "NOT_LIST_CONTAINS", "LIST_CONTAINS_ANY", "NOT_LIST_CONTAINS_ANY", "LIST_CONTAINS_ALL",
        "NOT_LIST_CONTAINS_ALL", "LIST_MEMBER_BEGINS_WITH", "NOT_LIST_MEMBER_BEGINS_WITH"]},
     "fieldName": {**STRING, "description": "A field, `___recordID`, `___createTime`, `___modTime`, or `___all` for token search."},
     "fieldValue": ref("FieldInput")},
    {"distance": {"type": "number", "description": "NEAR: meters."}},
)
SORT = obj({"fieldName": STRING}, {"ascending": BOOL, "relativeLocation": ref("FieldInput")})
RECORDS_QUERY = obj(
    {"query": obj({"recordType": TYPE_NAME}, {
        "filterBy": {"type": "array", "maxItems": 32, "items": FILTER},
        "sortBy": {"type": "array", "maxItems": 8, "items": SORT},
    })},
    {
        **ZONE_ID_OPTIONAL, "zoneWide": BOOL, "resultsLimit": {"type": "integer", "minimum": 1},
        "continuationMarker": ref("Base64Token"), **DESIRED,
    },
)
QUERY_ANSWER = obj({"records": {"type": "array", "items": ref("Record")}}, {"continuationMarker": ref("Base64Token")})
LOOKUP_INFO = obj(None, {"emailAddress": STRING, "phoneNumber": STRING, "userRecordName": STRING},
                  "A user identity lookup dictionary: exactly one of the three keys.")
NAME_COMPONENTS = obj(None, {"givenName": STRING, "familyName": STRING})
USER_IDENTITY = obj({"lookupInfo": LOOKUP_INFO}, {"userRecordName": STRING, "nameComponents": NAME_COMPONENTS},
                    "CloudKit's user identity dictionary: a user who is not discoverable answers `lookupInfo` alone.")
CALLER = obj({"userRecordName": STRING, "lookupInfo": LOOKUP_INFO}, {"nameComponents": NAME_COMPONENTS})
CURRENT = obj({"userRecordName": STRING}, {"firstName": STRING, "lastName": STRING})
USERS_ANSWER = obj({"users": {"type": "array", "items": USER_IDENTITY}})

PATHS = {}


def database_path(operation_name, methods):
    PATHS[f"{DATABASE}/{operation_name}"] = {"parameters": PATH_PARAMETERS, **methods}


database_path("zones/list", {
    "get": operation("zonesList", "List the database's zones",
                     "Private: `_defaultZone` and the caller's custom zones; public: `_defaultZone`; shared: other users' zones whose shares the caller accepted.",
                     "zones", None, ref("ZonesAnswer"), DATABASE_ERRORS, READ),
    "post": operation("zonesListPost", "List the database's zones (POST)", "As GET; the body is ignored.",
                      "zones", None, ref("ZonesAnswer"), DATABASE_ERRORS, READ, "Apple documents GET only."),
})
database_path("zones/lookup", {"post": operation(
    "zonesLookup", "Look zones up", "Each zone once, at most 200; an unknown zone answers a ZONE_NOT_FOUND entry "
    "repeating the `zoneID` as sent.", "zones", ZONES_LOOKUP, ref("ZonesAnswer"), DATABASE_ERRORS, READ,
    example={"zones": [{"zoneName": "_defaultZone"}, {"zoneName": "Notes"}]})})
database_path("zones/modify", {"post": operation(
    "zonesModify", "Create and delete custom zones", "Private database only; one transaction. Creating an existing "
    "zone returns it; deleting one deletes its records (answered as `{zoneID, deleted: true}`).",
    "zones", ZONES_MODIFY, ref("ZonesAnswer"), DATABASE_ERRORS, WRITE,
    example={"operations": [{"operationType": "create", "zone": {"zoneID": {"zoneName": "Notes"}}}]})})
DEVICE_HEADER = {"name": "X-Stratus-Device-ID", "in": "header", "required": False, EXT: True,
                 "description": "The device the write comes from: stamped on the records' `created`/`modified` `deviceID` and "
                 "on the events' causation. Absent: `_stratus`.",
                 "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,64}$"}}
database_path("records/modify", {"post": {"parameters": [DEVICE_HEADER], **operation(
    "recordsModify", "Save and delete records", "At most 200 operations, one per record. In a custom zone atomic "
    "unless `atomic: false` (a failure fails all; the others answer ATOMIC_ERROR). Each operation answers a record, "
    "a deleted record, or a record error.", "records", RECORDS_MODIFY, ref("RecordsAnswer"),
    DATABASE_ERRORS + [404, 413], WRITE, example={"zoneID": {"zoneName": "Notes"}, "operations": [{
        "operationType": "forceReplace",
        "record": {"recordName": "note-1", "recordType": "Note",
                   "fields": {"title": {"value": "Hello"}, "stars": {"value": 3, "type": "INT64"}}}}]})}})
database_path("records/lookup", {"post": operation(
    "recordsLookup", "Fetch records by name", "Each record once, at most 200; an unknown record answers a NOT_FOUND "
    "entry.", "records", RECORDS_LOOKUP, ref("RecordsAnswer"), DATABASE_ERRORS + [404], READ,
    example={"zoneID": {"zoneName": "Notes"}, "records": [{"recordName": "note-1"}]})})
database_path("records/query", {"post": operation(
    "recordsQuery", "Query records", "Reads the query index, which the indexer fills from the event log: eventually "
    "consistent. Continuation markers are bound to their query.", "records", RECORDS_QUERY, QUERY_ANSWER,
    DATABASE_ERRORS + [404], READ, answer_headers={"X-Stratus-Index-Behind-Events": {
        "description": "Events of the queried zones the index has yet to apply.", "schema": {"type": "integer", "minimum": 0},
        EXT: True}}, example={"zoneID": {"zoneName": "Notes"}, "resultsLimit": 10, "query": {
        "recordType": "Note", "filterBy": [{"comparator": "EQUALS", "fieldName": "title", "fieldValue": {"value": "Hello"}}],
        "sortBy": [{"fieldName": "___modTime", "ascending": False}]}})})
database_path("records/changes", {"post": operation(
    "recordsChanges", "A custom zone's changed records since a token", "Each changed record once at its latest "
    "version, deletes as `{recordName, deleted: true}`. `_defaultZone` is BAD_REQUEST naming records/query.",
    "sync", ref("ZoneChangesRequest"), ref("ZoneChanges"), DATABASE_ERRORS + [404, 410], READ,
    example={"zoneID": {"zoneName": "Notes"}, "resultsLimit": 50})})
SHORT_GUIDS = obj({"shortGUIDs": {"type": "array", "minItems": 1, "maxItems": 200, "items": {"anyOf": [
    {"type": "string", "minLength": 1, "maxLength": 64},
    obj({"value": {"type": "string", "minLength": 1, "maxLength": 64}}, {"shouldFetchRootRecord": BOOL, "rootRecordDesiredKeys": NAMES}),
]}}}, {"numbersAsStrings": BOOL})
SHARE_RESULTS = obj({"results": {"type": "array", "items": obj({"shortGUID": STRING}, {
    "containerIdentifier": STRING, "environment": STRING, "databaseScope": STRING, "zoneID": ref("ZoneID"), "share": ref("Record"),
    "url": STRING, "rootRecordName": STRING, "rootRecord": ref("Record"), "ownerIdentity": {"type": "object"},
    "participantType": {"type": "string", "enum": ["OWNER", "USER", "PUBLIC_USER"]},
    "participantStatus": {"type": "string", "enum": ["PENDING", "ACCEPTED", "REMOVED"]},
    "participantPermission": {"type": "string", "enum": ["NONE", "READ_ONLY", "READ_WRITE"]},
    "serverErrorCode": STRING, "reason": STRING, "uuid": STRING})}})
database_path("records/resolve", {"post": operation(
    "recordsResolve", "Share metadata by short GUID", "Signed-in users only; each short GUID once, at most 200. A share is "
    "found by its participants and, when public, by anyone signed in; otherwise its entry is NOT_FOUND. Apple documents "
    "the public database's path; any database segment is accepted.", "records", SHORT_GUIDS, SHARE_RESULTS, DATABASE_ERRORS, WRITE,
    example={"shortGUIDs": [{"value": "0a1B2c3D4e5F6g7H8i9J0k", "shouldFetchRootRecord": True}]})})
database_path("records/accept", {"post": operation(
    "recordsAccept", "Accept shares by short GUID", "An invited participant (by user record name or email address) becomes "
    "ACCEPTED; anyone signed in joins a public share as PUBLIC_USER. Each entry answers as records/resolve does; a "
    "removed participant's is ACCESS_DENIED.", "records", SHORT_GUIDS, SHARE_RESULTS, DATABASE_ERRORS, WRITE,
    example={"shortGUIDs": [{"value": "0a1B2c3D4e5F6g7H8i9J0k"}]})})
database_path("changes/zone", {"post": operation(
    "changesZone", "Several zones' changes", "One records/changes answer per zone, or a zone error (with `zoneID`); "
    "each zone once, at most 200.", "sync",
    obj({"zones": {"type": "array", "minItems": 1, "maxItems": 200, "items": ref("ZoneChangesRequest")}}),
    obj({"zones": {"type": "array", "items": {"anyOf": [ref("ZoneChanges"), ref("ZoneError")]}}}),
    DATABASE_ERRORS, READ, example={"zones": [{"zoneID": {"zoneName": "Notes"}, "desiredKeys": ["title"]}]})})
for name, operation_id in (("zones/changes", "zonesChanges"), ("changes/database", "changesDatabase")):
    database_path(name, {"post": operation(
        operation_id, "The database's changed zones since a token", "The token comes back as both `syncToken` and "
        "`metaSyncToken`; the public database reports no zone changes. An empty body starts from the beginning. The token "
        "is the snapshot the answer was read in, the same size whatever the number of zones.",
        "sync", ref("DatabaseChangesRequest"), ref("DatabaseChanges"), DATABASE_ERRORS + [410], READ,
        example={"resultsLimit": 50})})
for name, answer, about in (
        ("caller", CALLER, "The caller's user identity, at the top level: `userRecordName`, `lookupInfo` and, for a "
         "discoverable user with a name, `nameComponents` (the email address in `lookupInfo` too only when discoverable)."),
        ("current", CURRENT, "The older form: `userRecordName`, and `firstName` / `lastName` for a discoverable user.")):
    database_path(f"users/{name}", {
        "get": operation(f"users{name.capitalize()}", "The caller's identity", about, "users", None, answer, DATABASE_ERRORS, WRITE),
        "post": operation(f"users{name.capitalize()}Post", "The caller's identity (POST)", "As GET.",
                          "users", None, answer, DATABASE_ERRORS, WRITE, "Apple documents GET only."),
    })
database_path("users/discover", {
    "get": operation("usersDiscoverAll", "The container's discoverable users",
                     "At most 200 (`STRATUS_MAX_RESULTS`), in user record name order, each with `lookupInfo` "
                     "`{userRecordName}` and never an email address. Apple answers the discoverable users of the caller's "
                     "address book; Stratus has no address books.", "users", None, USERS_ANSWER, DATABASE_ERRORS, WRITE),
    "post": operation("usersDiscover", "Discover users by lookup info",
                      "One user identity per lookup info, in order (at most 200, each asked once): a discoverable user's "
                      "`userRecordName`, the `lookupInfo` as sent and `nameComponents`; anyone else (not discoverable, "
                      "unknown, or a phone number) the `lookupInfo` alone.", "users",
                      obj({"lookupInfos": {"type": "array", "minItems": 1, "maxItems": 200, "items": LOOKUP_INFO}}),
                      USERS_ANSWER, DATABASE_ERRORS, WRITE,
                      example={"lookupInfos": [{"emailAddress": "alice@example.com"}]}),
})
for name, key, operation_id in (("email", "emailAddress", "usersLookupEmail"), ("id", "userRecordName", "usersLookupID")):
    database_path(f"users/lookup/{name}", {"post": operation(
        operation_id, f"Look discoverable users up by {key}",
        f"`users[{{{key}}}]` (at most 200, each asked once) → the discoverable users among them, in the order asked, "
        "as user identities; others are left out.", "users",
        obj({"users": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj({key: STRING})}}),
        USERS_ANSWER, DATABASE_ERRORS, WRITE,
        example={"users": [{key: "alice@example.com" if key == "emailAddress" else "_0123456789abcdef0123456789abcdef"}]})})

SUBSCRIPTION = {"type": "object", "description": "CloudKit's subscription dictionary: `subscriptionID`, `subscriptionType` "
                "(query, zone, database), `query`, `zoneID`, `zoneWide`, `firesOn`, `firesOnce`, `notificationInfo`."}
SUBSCRIPTIONS_ANSWER = obj({"subscriptions": {"type": "array", "items": {"type": "object"}}})
database_path("subscriptions/modify", {"post": operation(
    "subscriptionsModify", "Create, replace and delete subscriptions", "At most 200 operations, one per subscription; "
    "each answers the saved subscription, `{subscriptionID, deleted: true}`, or an error naming the subscriptionID. "
    "`create` saves (creating or replacing), `update` needs an existing subscription.", "subscriptions",
    obj({"operations": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj(
        {"operationType": {"type": "string", "enum": ["create", "update", "delete"]}, "subscription": SUBSCRIPTION})}}),
    SUBSCRIPTIONS_ANSWER, DATABASE_ERRORS, WRITE,
    example={"operations": [{"operationType": "create", "subscription": {
        "subscriptionID": "big-notes", "subscriptionType": "query", "firesOn": ["create", "update"],
        "query": {"recordType": "Note"}, "zoneWide": True}}]})})
database_path("subscriptions/list", {
    "get": operation("subscriptionsList", "The caller's subscriptions in the database", "By id.", "subscriptions", None,
                     SUBSCRIPTIONS_ANSWER, DATABASE_ERRORS, WRITE),
    "post": operation("subscriptionsListPost", "The caller's subscriptions (POST)", "As GET; the body is ignored.",
                      "subscriptions", None, SUBSCRIPTIONS_ANSWER, DATABASE_ERRORS, WRITE),
})
database_path("subscriptions/lookup", {"post": operation(
    "subscriptionsLookup", "Fetch subscriptions by id", "Each id once, at most 200; an unknown one answers a NOT_FOUND entry.",
    "subscriptions", obj({"subscriptions": {"type": "array", "maxItems": 200, "items": obj({"subscriptionID": STRING})}}),
    SUBSCRIPTIONS_ANSWER, DATABASE_ERRORS, WRITE, example={"subscriptions": [{"subscriptionID": "big-notes"}]})})

USER_PATH_PARAMETERS = [{"$ref": "#/components/parameters/container"}, {"$ref": "#/components/parameters/environment"}]
USER_ERRORS = [400, 401, 403, 421, 429, 500, 503]
NOTIFICATION_LIST = {"type": "array", "items": {"type": "object"}}
for root in ("/database/1/{container}/{environment}", "/device/1/{container}/{environment}"):
    tag = "Device" if root.startswith("/device") else ""
    PATHS[f"{root}/tokens/create"] = {"parameters": USER_PATH_PARAMETERS, "post": operation(
        f"tokensCreate{tag}", "A web courier token for the caller", "Answers `apnsToken`, `webcourierURL` (long poll) and `webSocketURL` (the same courier as a WebSocket on this port, "
        "`GET …/courier/{token}/websocket` with an upgrade: each notification pushed as a text message as it is logged); "
        "the courier hands out the caller's notifications logged from now on.", "notifications",
        obj(optional={"apnsEnvironment": {"type": "string", "enum": ["development", "production"]}}),
        obj({"apnsEnvironment": STRING, "apnsToken": STRING, "webcourierURL": STRING, "webSocketURL": STRING}), USER_ERRORS, WRITE,
        example={"apnsEnvironment": "development"})}
    PATHS[f"{root}/tokens/register"] = {"parameters": USER_PATH_PARAMETERS, "post": operation(
        f"tokensRegister{tag}", "Register an APNs device token for the caller", "The token in hexadecimal.",
        "notifications", obj({"apnsToken": STRING}, {"apnsEnvironment": {"type": "string", "enum": ["development", "production"]}}),
        obj({"apnsEnvironment": STRING, "apnsToken": STRING}), USER_ERRORS, WRITE,
        example={"apnsEnvironment": "development", "apnsToken": "ab" * 32})}
    PATHS[f"{root}/notifications/changes"] = {"parameters": USER_PATH_PARAMETERS, "post": operation(
        f"notificationsChanges{tag}", "The caller's notifications since a token", "Oldest first, with `syncToken` and "
        "`moreComing`; an empty body starts from the beginning.", "notifications",
        obj(optional={"syncToken": STRING, "resultsLimit": {"type": "integer"}}),
        obj({"notifications": NOTIFICATION_LIST, "syncToken": STRING, "moreComing": BOOL}), USER_ERRORS, WRITE,
        "A Stratus extension.", example={"resultsLimit": 50})}
    PATHS[f"{root}/notifications/read"] = {"parameters": USER_PATH_PARAMETERS, "post": operation(
        f"notificationsRead{tag}", "Mark notifications read", "At most 200 ids; lowers the badge count.", "notifications",
        obj({"notificationIDs": {"type": "array", "maxItems": 200, "items": STRING}}),
        obj({"notifications": NOTIFICATION_LIST}), USER_ERRORS, WRITE, "A Stratus extension.",
        example={"notificationIDs": ["00000000-0000-0000-0000-000000000000"]})}
PATHS["/device/1/{container}/{environment}/courier/{token}"] = {"get": {
    "operationId": "webCourier", "tags": ["notifications"], "summary": "The web courier's long poll",
    "description": "As Apple's courier: answers one notification, CloudKit's push dictionary (`ck` with `qry`, `fet` or "
                   "`met`, and `aps`), the oldest the token has not been handed yet; the next poll gets the next. With "
                   "none waiting it waits up to `timeout` seconds (default 30) for one and answers 204 when none came. "
                   "`format=list` (a Stratus extension) answers `{notifications: [...]}`: every notification waiting, "
                   "an empty list when none came. The token (from tokens/create) is the credential.",
    "parameters": USER_PATH_PARAMETERS + [
        {"name": "token", "in": "path", "required": True, "schema": {"type": "string", "minLength": 1, "maxLength": 128}},
        {"name": "timeout", "in": "query", "required": False, "schema": {"type": "integer", "minimum": 0, "maximum": 1}},
        {"name": "format", "in": "query", "required": False, EXT: True, "schema": {"type": "string", "enum": ["list"]}}],
    "security": [],
    "responses": {
        "200": ok({"anyOf": [
            obj({"ck": {"type": "object"}}, {"aps": {"type": "object"}}),
            extension(obj({"notifications": NOTIFICATION_LIST}), "format=list"),
        ]}),
        "204": {"description": "No notification came within the wait (Apple's shape)."},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 500, 503)},
    },
}}

ASSETS_UPLOAD = obj(
    {"tokens": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj(
        {"recordType": TYPE_NAME, "fieldName": TYPE_NAME}, {"recordName": RECORD_NAME})}},
    ZONE_ID_OPTIONAL,
)
database_path("assets/upload", {"post": operation(
    "assetsUpload", "Upload URLs for asset fields",
    "One URL per token, for the asset of one field of one record (named, or a new UUID): POST the bytes there "
    "(until STRATUS_ASSET_URL_TTL_SECONDS pass) and put the answered `singleFile` into the field with records/modify.",
    "assets", ASSETS_UPLOAD,
    obj({"tokens": {"type": "array", "items": obj({"recordName": STRING, "fieldName": STRING, "url": STRING}, {"recordType": STRING})}}),
    DATABASE_ERRORS + [404], WRITE,
    example={"zoneID": {"zoneName": "_defaultZone"}, "tokens": [{"recordType": "Photo", "recordName": "p1", "fieldName": "image"}]})})
ASSETS_REREFERENCE = obj(
    {"assets": {"type": "array", "minItems": 1, "maxItems": 200, "items": obj(
        {"recordName": RECORD_NAME, "fieldName": TYPE_NAME})}},
    ZONE_ID_OPTIONAL,
)
database_path("assets/rereference", {"post": operation(
    "assetsRereference", "New receipts for assets records hold",
    "For each record field named (of a record the caller may read, in the zone), new receipts for the assets it holds, "
    "sharing their bytes: put `value` into another record's field with records/modify, as an upload's `singleFile` "
    "(each receipt binds to the first field it is saved in, within half of STRATUS_ASSET_GRACE_SECONDS). A field "
    "without an asset, an unknown record and one the caller may not read answer the same NOT_FOUND entry. At most "
    "200 fields and 200 assets per request; not in the shared database.",
    "assets", ASSETS_REREFERENCE,
    obj({"assets": {"type": "array", "items": {"anyOf": [
        obj({"recordName": STRING, "fieldName": STRING, "value": {"anyOf": [{"type": "object"}, {"type": "array", "items": {"type": "object"}}]}}),
        {"allOf": [ref("Error"), obj({"recordName": STRING, "fieldName": STRING})]},
    ]}}}),
    DATABASE_ERRORS + [404], WRITE,
    example={"zoneID": {"zoneName": "Notes"}, "assets": [{"recordName": "p1", "fieldName": "image"}]})})
GRANT = {"name": "grant", "in": "path", "required": True, "description": "The signed grant the URL carries.",
         "schema": {"type": "string", "minLength": 1, "maxLength": 2048}}
PATHS["/assets/1/upload/{grant}"] = {"post": {
    "operationId": "assetUpload", "tags": ["assets"], "summary": "Upload an asset's bytes",
    "description": "The URL from assets/upload is the credential. The body is the asset's bytes, or "
                   "multipart/form-data whose one file part (a `filename` in its Content-Disposition, or a Content-Type) "
                   "holds them; at most STRATUS_MAX_ASSET_BYTES of file (50 MB by default), streamed to the blob store "
                   "and hashed on the way; an optional `Content-Digest: sha-256=:…:` of the file is checked. A multipart "
                   "envelope is bounded (70-character boundary, 8 KiB and 16 header lines per part, 16 parts, 1 MiB in "
                   "all: LIMIT_EXCEEDED) and a malformed one is BAD_REQUEST. Answers the file's receipt as `singleFile`. "
                   "A URL takes one upload.",
    "parameters": [GRANT, {"name": "Content-Digest", "in": "header", "required": False, EXT: True, "schema": {"type": "string"}}],
    "requestBody": {"required": True, "content": {
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        "multipart/form-data": {"schema": {"type": "object", "properties": {"file": {"type": "string", "format": "binary"}}}}}},
    "security": [],
    "responses": {
        "200": ok(obj({"singleFile": ref("Asset")})),
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 413, 500, 503)},
    },
}}
PATHS["/assets/1/download/{grant}"] = {"get": {
    "operationId": "assetDownload", "tags": ["assets"], "summary": "Download an asset",
    "description": "A record's `downloadURL` (signed, expires). Streams the bytes; one `Range: bytes=…` range answers 206, "
                   "a range past the end 416.",
    "parameters": [GRANT, {"name": "Range", "in": "header", "required": False, "schema": {"type": "string"}}],
    "security": [],
    "responses": {
        "200": {"description": "The asset's bytes.", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        "206": {"description": "The requested range (`Content-Range`).", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
                "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (403, 404, 416, 500, 503)},
    },
}}

PATHS["/auth/1/{container}/signin"] = {"post": {
    "operationId": "signIn", "tags": ["auth"], EXT: True,
    "summary": "Sign in with the container's user directory",
    "description": "Exchanges a login and password for a web auth token, sent as `ckWebAuthToken` until `expiresAt` "
                   "(ms). A wrong password and an unknown login answer the same AUTHENTICATION_FAILED. The hosted "
                   "sign-in page (the redirectURL of AUTHENTICATION_REQUIRED) posts here with `ckSignInRequest` in place "
                   "of `ckAPIToken`.",
    "parameters": [{"$ref": "#/components/parameters/container"}],
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": obj({"login": STRING, "password": STRING}),
        "example": {"login": "fuzz@example.com", "password": "a long fuzz password"},
    }}},
    "security": [{"ckAPIToken": []}],
    "responses": {
        "200": ok(obj({"ckWebAuthToken": STRING, "userRecordName": STRING, "expiresAt": INTEGER})),
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 429, 500, 503)},
    },
}}

SIGN_IN_ANSWER = obj(
    {"ckWebAuthToken": STRING, "userRecordName": STRING, "expiresAt": INTEGER, "sessionID": STRING},
    {"created": extension(BOOL, "Whether this sign-in created the user (ID-token sign-in).")})
PATHS["/auth/1/{container}/signin"]["post"]["responses"]["200"] = ok(SIGN_IN_ANSWER)
ID_TOKEN_REQUEST = {"required": True, "content": {"application/json": {
    "schema": obj({"idToken": {"type": "string", "maxLength": 8192}},
                  {"nonce": {"type": "string", "maxLength": 255}, "givenName": STRING, "familyName": STRING}),
    "example": {"idToken": "eyJhbGciOiJSUzI1NiIsImtpZCI6ImsxIn0.e30.AA", "nonce": "a fuzz nonce"},
}}}
USER_SECURITY = [{"ckAPIToken": [], "ckWebAuthToken": []}]


def auth_path(path, method, operation_id, summary, description, answer, statuses, body=None, security=None):
    operation = {
        "operationId": operation_id, "tags": ["auth"], EXT: True, "summary": summary, "description": description,
        "parameters": [{"$ref": "#/components/parameters/container"}],
        "security": security or USER_SECURITY,
        "responses": {
            "200": ok(answer),
            **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in statuses},
        },
    }
    if body:
        operation["requestBody"] = body
    PATHS.setdefault(f"/auth/1/{{container}}/{path}", {})[method] = operation


auth_path("signin/idtoken", "post", "signInWithIDToken", "Sign in with an ID token (Sign in with Apple, OpenID Connect)",
          "Exchanges an ID token of an issuer the container trusts (`stratus container auth add`) and the nonce the app "
          "asked the provider for (the token's nonce claim is the nonce or its SHA-256 in hex) for a web auth token. The "
          "user linked to the account (issuer, subject) signs in; an account linked to nobody creates a user, with the "
          "claims' verified email address (Apple's private relay addresses included) and `givenName`/`familyName` where "
          "the token has no name. RS256 and ES256 only; the signature, `iss`, `aud` (`azp`), `exp`, `nbf`, `iat` and the "
          "nonce are checked, and a nonce is used once. A refused token stores nothing. Refused tokens count against "
          "the client's address in the password sign-in's limiter: past its limit, THROTTLED with `retryAfter`.",
          SIGN_IN_ANSWER, (400, 401, 429, 500, 503), body=ID_TOKEN_REQUEST, security=[{"ckAPIToken": []}])
auth_path("link/idtoken", "post", "linkIDToken", "Link another account to the signed-in user",
          "Links the account an ID token names (checked as for signin/idtoken) to the signed-in user, who can then sign in "
          "with it too. `linked` is false when it was linked to this user already; EXISTS when it is another user's.",
          obj({"userRecordName": STRING, "issuer": STRING, "linked": BOOL}), (400, 401, 403, 404, 409, 500, 503), body=ID_TOKEN_REQUEST)
SESSION = obj({"sessionID": STRING, "method": {"enum": ["password", "idtoken"]}, "createdAt": INTEGER, "expiresAt": INTEGER,
               "active": BOOL, "current": BOOL}, {"issuer": STRING, "revokedAt": INTEGER})
REVOKED = obj({"revokedSessions": INTEGER})
auth_path("sessions", "get", "sessionsList", "The signed-in user's sessions",
          "One session per sign-in, the newest first (at most 100), revoked and expired ones included; `current` marks the "
          "one this request's token belongs to. Times in ms.",
          obj({"sessions": {"type": "array", "items": SESSION}}), (400, 401, 403, 500, 503))
auth_path("sessions/revoke", "post", "sessionsRevoke", "Revoke one of the signed-in user's sessions",
          "Its web auth tokens are refused from now on, on every API process at once.",
          REVOKED, (400, 401, 403, 404, 500, 503),
          body={"required": True, "content": {"application/json": {
              "schema": obj({"sessionID": {"type": "string", "pattern": "^[0-9a-f]{32}$"}}),
              "example": {"sessionID": "0123456789abcdef0123456789abcdef"}}}})
auth_path("signout", "post", "signOut", "Sign out",
          "Revokes the session of this request's web auth token. BAD_REQUEST for a token without a session "
          "(`stratus user token`): sign out everywhere instead.",
          REVOKED, (400, 401, 403, 500, 503))
auth_path("signout/everywhere", "post", "signOutEverywhere", "Sign out everywhere",
          "Revokes every session of the signed-in user and ends every web auth token issued before, with or without a "
          "session. `revokedSessions` counts the sessions that were active.",
          REVOKED, (400, 401, 403, 404, 500, 503))
auth_path("account/delete", "post", "deleteAccount", "Delete the signed-in user's account",
          "Deletes the signed-in user and everything of theirs: their zones and records in every database, the public "
          "records they created, their assets, subscriptions, sessions and linked identities; they leave others' shares "
          "and the shares they own end (docs/operations.md, \"Deleting a user\"). The web auth token must come from a "
          "sign-in of the last `STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS` (600): otherwise AUTHENTICATION_FAILED, sign "
          "in again. The answer comes once the user is signed out everywhere (`step` past `sign-out`); the rest runs in "
          "stratus-gc.",
          obj({"userRecordName": STRING, "step": STRING}), (400, 401, 403, 500, 503))
auth_path("account/export", "post", "exportAccount", "Download the signed-in user's data as an export archive",
          "Streams a tar archive of the signed-in user's data while it is made: their private database's zones and "
          "records (CloudKit's record dictionaries, one a line), the asset bytes those hold, the public records they "
          "created, their subscriptions, the container's schema and their directory entry, with a manifest of SHA-256 "
          "checksums as the last file (docs/operations.md, \"Exporting and importing\"). The web auth token must come "
          "from a sign-in of the last `STRATUS_ACCOUNT_DELETION_SIGNIN_SECONDS` (600), as for account/delete: otherwise "
          "AUTHENTICATION_FAILED, sign in again. A failure once the stream has begun ends it without the manifest: "
          "`stratus import` refuses such an archive.",
          obj({}), (400, 401, 403, 500, 503))
PATHS["/auth/1/{container}/account/export"]["post"]["responses"]["200"] = {
    "description": "The archive (tar), streamed.", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
    "content": {"application/x-tar": {"schema": {"type": "string", "format": "binary"}}}}

SIGN_IN_REQUEST = {"ckAPIToken": []}
REQUESTED = obj({"requested": BOOL, "message": STRING})
EMAIL = {"type": "string", "maxLength": 254}
PASSWORD = {"type": "string", "minLength": 8, "maxLength": 1024}
CODE = {"type": "string", "pattern": "^[0-9a-f]{64}$"}


def email_body(schema, example):
    return {"required": True, "content": {"application/json": {"schema": schema, "example": example}}}


auth_path("signup", "post", "signUp", "Sign up by email",
          "Sends a verification message when the container lets the address sign up (`stratus container set --sign-up "
          "open|invite-only`): no user has it and, invite-only, it was invited. The answer is the same for every address. "
          "ACCESS_DENIED when sign-up is off or the server sends no email. The hosted sign-in page sends `ckSignInRequest` "
          "in place of `ckAPIToken`. Throttled per address and per client (THROTTLED).",
          REQUESTED, (400, 401, 403, 404, 429, 500, 503),
          body=email_body(obj({"email": EMAIL, "password": PASSWORD}), {"email": "fuzz@example.com", "password": "a long fuzz password"}),
          security=[SIGN_IN_REQUEST])
auth_path("signup/verify", "post", "signUpVerify", "Confirm a sign-up's address",
          "Uses the message's code up and creates the user (its login and email address the address), then signs in. "
          "A used, expired or unknown code is AUTHENTICATION_FAILED and changes nothing; EXISTS when a user took the "
          "address meanwhile.",
          SIGN_IN_ANSWER, (400, 401, 409, 429, 500, 503),
          body=email_body(obj({"token": CODE}), {"token": "0" * 64}), security=[{}])
auth_path("password/reset", "post", "passwordReset", "Ask for a password reset message",
          "Sends a reset message to the user whose email address or login this is; the same answer for every address. "
          "ACCESS_DENIED when the server sends no email. Throttled per address and per client.",
          REQUESTED, (400, 401, 403, 429, 500, 503),
          body=email_body(obj({"email": EMAIL}), {"email": "fuzz@example.com"}), security=[SIGN_IN_REQUEST])
auth_path("password/reset/confirm", "post", "passwordResetConfirm", "Set a new password with a reset code",
          "Uses the code up, sets the password, ends every earlier web auth token of the user, and signs in. A used, "
          "expired or unknown code is AUTHENTICATION_FAILED and changes nothing.",
          SIGN_IN_ANSWER, (400, 401, 429, 500, 503),
          body=email_body(obj({"token": CODE, "password": PASSWORD}), {"token": "0" * 64, "password": "a long fuzz password"}),
          security=[{}])
PATHS["/auth/1/{container}/signin/page"] = {"get": {
    "operationId": "signInPage", "tags": ["auth"], EXT: True,
    "summary": "The hosted sign-in page",
    "description": "Where the redirectURL of AUTHENTICATION_REQUIRED sends a web app's user: an HTML page that signs in "
                   "with a password (or signs up, or resets a password by email) and posts `{ckWebAuthToken}` to the "
                   "window that opened it, at the origin `request` names. Without a valid `request` it says so.",
    "parameters": [{"$ref": "#/components/parameters/container"},
                   {"name": "request", "in": "query", "required": False, "schema": {"type": "string", "maxLength": 2048},
                    "description": "The signed sign-in request redirectURL carries."}],
    "security": [{}],
    "responses": {
        "200": {"description": "The page.", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
                "content": {"text/html": {"schema": STRING}}},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 500, 503)},
    },
}}

PATHS["/auth/1/{container}/signin/provider"] = {"get": {
    "operationId": "signInPageProvider", "tags": ["auth"], EXT: True,
    "summary": "The hosted sign-in page's button for a trusted issuer",
    "description": "Sends the user's window to the issuer's authorization endpoint (configured with `stratus container auth "
                   "add --authorization-url`, or from the issuer's discovery document) with an OpenID Connect ID-token request: "
                   "`response_type=id_token`, `response_mode=form_post`, the issuer's web client id (`--web-client-id`), the "
                   "redirect URL (`PUBLIC_URL/auth/1/{container}/signin/provider/callback` unless `--redirect-url`), a `state` "
                   "signed for the waiting sign-in request and a fresh `nonce`. For an issuer with a token endpoint "
                   "(`--token-url`), the authorization-code flow with PKCE instead: `response_type=code`, `code_challenge` "
                   "(S256 of a verifier derived from the state, which never leaves the server but for the token endpoint) and "
                   "`code_challenge_method=S256`; the code comes back in the callback's query. AUTHENTICATION_FAILED without a valid "
                   "`ckSignInRequest`; NOT_FOUND for an issuer the container does not trust; BAD_REQUEST for one without a web "
                   "client id.",
    "parameters": [{"$ref": "#/components/parameters/container"},
                   {"name": "ckSignInRequest", "in": "query", "required": True, "schema": {"type": "string", "maxLength": 2048},
                    "description": "The signed sign-in request of the hosted page (redirectURL's `request`)."},
                   {"name": "issuer", "in": "query", "required": True, "schema": {"type": "string", "minLength": 1, "maxLength": 2048},
                    "description": "The issuer, as `stratus container auth list` names it."}],
    "security": [{}],
    "responses": {
        "302": {"description": "To the issuer's authorization endpoint.",
                "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"},
                            "Location": {"description": "The authorization request.", "schema": STRING}}},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 403, 404, 500, 503)},
    },
}}
PROVIDER_CALLBACK_GET = {
    "operationId": "signInPageProviderCodeCallback", "tags": ["auth"], EXT: True,
    "summary": "Where a trusted issuer sends the browser back with an authorization code",
    "description": "The authorization-code flow's answer, in the query (OAuth's default response mode). The `state` is "
                   "checked as for the posted answer; the code is exchanged at the issuer's token endpoint with the state's "
                   "`code_verifier` (and the client secret, HTTP Basic, when one is set); the `id_token` the endpoint answers "
                   "is checked as for the posted answer. A code the endpoint refuses (used before, issued for another "
                   "sign-in's challenge) is AUTHENTICATION_FAILED; a refused answer stores nothing.",
    "parameters": [{"$ref": "#/components/parameters/container"},
                   {"name": "code", "in": "query", "schema": {"type": "string", "maxLength": 4096}, "description": "The authorization code."},
                   {"name": "state", "in": "query", "schema": {"type": "string", "maxLength": 4096}, "description": "The state the request carried."},
                   {"name": "error", "in": "query", "schema": STRING, "description": "The issuer's refusal, instead of a code."}],
    "security": [{}],
    "responses": {
        "200": {"description": "The page that hands the web auth token to the app.", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
                "content": {"text/html": {"schema": STRING}}},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 403, 429, 500, 503)},
    },
}
PATHS["/auth/1/{container}/signin/provider/callback"] = {"get": PROVIDER_CALLBACK_GET, "post": {
    "operationId": "signInPageProviderCallback", "tags": ["auth"], EXT: True,
    "summary": "Where a trusted issuer posts its answer to the hosted page's sign-in",
    "description": "The issuer's form answer (`response_mode=form_post`). The `state` must be one this server issued for the "
                   "container, not expired (ten minutes, at most the sign-in request's hour); the `id_token` is checked as "
                   "signin/idtoken checks one, with the state's nonce and the issuer's web client id as the only audience, and "
                   "its nonce is used once, so a replayed answer is refused. The user linked to the account signs in, or is "
                   "created. The answer is a page that posts `{ckWebAuthToken}` to the window that opened the sign-in page, "
                   "at the origin of the sign-in request, and closes. A refused answer stores nothing and counts against the "
                   "client's address in the sign-in limiter.",
    "parameters": [{"$ref": "#/components/parameters/container"}],
    "requestBody": {"required": True, "content": {"application/x-www-form-urlencoded": {"schema": obj({}, {
        "id_token": STRING, "code": STRING, "state": STRING, "error": STRING,
        "user": {"type": "string", "description": "Sign in with Apple: JSON with the user's name, at the first sign-in only."}})}}},
    "security": [{}],
    "responses": {
        "200": {"description": "The page that hands the web auth token to the app.", "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
                "content": {"text/html": {"schema": STRING}}},
        **{str(status): {"$ref": f"#/components/responses/Error{status}"} for status in (400, 401, 403, 429, 500, 503)},
    },
}}


def operations_path(path, operation_id, summary, description, content):
    PATHS[path] = {"get": {
        "operationId": operation_id, "tags": ["operations"], EXT: True, "summary": summary, "description": description,
        "security": [], "responses": {"200": {"description": "Success.", "headers": {
            "X-Request-ID": {"$ref": "#/components/headers/RequestID"}}, "content": content}},
    }}


operations_path("/health", "health", "Whether the process is alive", "Always `{\"status\": \"ok\"}` while it serves.",
                {"application/json": {"schema": obj({"status": {"const": "ok"}})}})
operations_path("/ready", "ready", "Whether the database and the broker are reachable",
                "200 when every check passes, 503 (with the same dictionary) otherwise.",
                {"application/json": {"schema": ref("Status")}})
PATHS["/ready"]["get"]["responses"]["503"] = {
    "description": "A check failed: `checks` names it as `unreachable`.",
    "headers": {"X-Request-ID": {"$ref": "#/components/headers/RequestID"}},
    "content": {"application/json": {"schema": ref("Status")}},
}
operations_path("/metrics", "metrics", "Prometheus metrics", "The process's metrics in Prometheus text format.",
                {"text/plain": {"schema": STRING}})
operations_path("/openapi.json", "openapi", "This document", "The OpenAPI 3.1 document of the HTTP API (docs/openapi.json).",
                {"application/json": {"schema": obj({"openapi": STRING, "paths": {"type": "object"}})}})

DOCUMENT_VALUE = {
    "openapi": "3.1.0",
    "info": {
        "title": "Stratus",
        "version": "1",
        "summary": "A self-hosted backend that speaks Apple's CloudKit Web Services protocol.",
        "description": "Every route stratus-api serves: CloudKit Web Services operations under "
                       "`/database/1/{container}/{environment}/{database}/…`, Stratus's sign-in, and the operations "
                       "endpoints. Keys, operations, responses and headers that Apple does not document carry "
                       "`x-stratus-extension: true`. docs/compatibility.md lists every difference from Apple's service. "
                       "Bodies are JSON whatever Content-Type is sent. Every answer carries `X-Request-ID`, the `uuid` of "
                       "any error in it. Generated by scripts/openapi.py.",
    },
    "servers": [{"url": "http://127.0.0.1:8080", "description": "scripts/stack.sh"}],
    "tags": [
        {"name": "zones"}, {"name": "records"}, {"name": "assets"}, {"name": "sync"}, {"name": "users"},
        {"name": "auth", EXT: True}, {"name": "operations", EXT: True},
    ],
    "paths": PATHS,
    "components": {
        "schemas": SCHEMAS,
        "responses": RESPONSES,
        "parameters": {
            "container": {"name": "container", "in": "path", "required": True, "description": "The container, e.g. `iCloud.com.example.notes`.",
                          "schema": {"type": "string", "minLength": 1, "maxLength": 255}},
            "environment": {"name": "environment", "in": "path", "required": True,
                            "description": "`production` accepts new record types and fields as `development` does.",
                            "schema": {"type": "string", "enum": ["development", "production"]}, "example": "development"},
            "database": {"name": "database", "in": "path", "required": True,
                         "schema": {"type": "string", "enum": ["public", "private", "shared"]}, "example": "private"},
        },
        "headers": {
            "RequestID": {"description": "The request's id, also in the logs and in the events it appended.", "required": True,
                          "schema": STRING, EXT: True},
            "ErrorRequestID": {"description": "The request's id, the error's `uuid`.", "required": True, "schema": STRING,
                               EXT: True},
            "RetryAfter": {"description": "Seconds to wait, as `retryAfter`.", "required": True,
                           "schema": {"type": "integer", "minimum": 0}, EXT: True},
        },
        "securitySchemes": {
            "ckAPIToken": {"type": "apiKey", "in": "query", "name": "ckAPIToken",
                           "description": "The container's API token (`stratus container create`). Alone: anonymous reads of "
                                          "the public database, unless the container turns them off."},
            "ckWebAuthToken": {"type": "apiKey", "in": "query", "name": "ckWebAuthToken",
                               "description": "A user's web auth token, from POST /auth/1/{container}/signin or signin/idtoken (or `stratus user token`)."},
            "serverKeyID": {"type": "apiKey", "in": "header", "name": "X-Apple-CloudKit-Request-KeyID",
                            "description": "Server-to-server: the key id (`stratus key create`). Public database only; never with ckAPIToken."},
            "serverDate": {"type": "apiKey", "in": "header", "name": "X-Apple-CloudKit-Request-ISO8601Date",
                           "description": "Server-to-server: the request's UTC date, within 10 minutes of the server's clock."},
            "serverSignature": {"type": "apiKey", "in": "header", "name": "X-Apple-CloudKit-Request-SignatureV1",
                                "description": "Server-to-server: base64 ECDSA P-256 SHA-256 signature (DER) of "
                                               "`date:base64(sha256(body)):subpath`."},
        },
    },
}

# ---------------------------------------------------------------------------------------------
# Output


def document_text():
    return json.dumps(DOCUMENT_VALUE, indent=2, ensure_ascii=False) + "\n"


def swift_text(text):
    # One line: the document is data, read in docs/openapi.json.
    literal = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")
    return (
        "// Generated by scripts/openapi.py (from the description in that script, like docs/openapi.json): do not edit.\n"
        "\n"
        "/// The OpenAPI 3.1 document served at `GET /openapi.json`: docs/openapi.json byte for byte\n"
        "/// (OpenAPIContractTests checks it).\n"
        "enum OpenAPIDocument {\n"
        f'    static let json = "{literal}"\n'
        "}\n"
    )


def validate(text):
    try:
        from openapi_spec_validator import OpenAPIV31SpecValidator, validate as validate_spec
    except ImportError:
        sys.exit("openapi.py: openapi-spec-validator is not installed (run scripts/install-deps.sh)")
    validate_spec(json.loads(text), cls=OpenAPIV31SpecValidator)


def main(arguments):
    text = document_text()
    if arguments == ["--check"]:
        validate(text)
        stale = [str(path.relative_to(ROOT)) for path, wanted in ((DOCUMENT, text), (SWIFT, swift_text(text)))
                 if not path.exists() or path.read_text(encoding="utf-8") != wanted]
        if stale:
            sys.exit(f"openapi.py: {', '.join(stale)} differ from scripts/openapi.py: run python3 scripts/openapi.py")
        print("openapi.py: docs/openapi.json is valid OpenAPI 3.1 and up to date")
        return
    if arguments:
        sys.exit(__doc__)
    DOCUMENT.write_text(text, encoding="utf-8")
    SWIFT.write_text(swift_text(text), encoding="utf-8")
    print(f"openapi.py: wrote {DOCUMENT.relative_to(ROOT)} and {SWIFT.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
