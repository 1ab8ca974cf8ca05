-- Schema management (README "Schema"): per container and environment, the record types, their
-- fields with types and index flags, the grants of the security roles, and the roles a schema
-- creates. Development grows as saves bring new types and fields (in the save's transaction);
-- production changes only by `stratus schema deploy`, and is enforced once deployed. Every change
-- also appends a `schema.changed` event.

-- An environment whose schema is enforced: production once a schema was deployed to it. Until
-- then it takes saves as before schemas existed, so an upgrade never stops a running app.
CREATE TABLE schema_environments (
    container    text NOT NULL,
    environment  text NOT NULL,
    deployed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (container, environment)
);

CREATE TABLE schema_record_types (
    container    text NOT NULL,
    environment  text NOT NULL,
    record_type  text NOT NULL,
    -- [{"permissions": 1|2|4 (read, create, write; ored), "role": "_world"}, …] in the schema's order.
    grants       jsonb NOT NULL,
    PRIMARY KEY (container, environment, record_type)
);

-- Every field of every type, the system fields (___createTime, …) included: a save reads its record
-- type's rows by the primary key's prefix.
CREATE TABLE schema_fields (
    container    text NOT NULL,
    environment  text NOT NULL,
    record_type  text NOT NULL,
    field_name   text NOT NULL,
    -- The schema language's spelling: STRING, LIST<INT64>, ENCRYPTED BYTES, NUMBER PREFERRED AS DOUBLE.
    field_type   text NOT NULL,
    queryable    boolean NOT NULL,
    searchable   boolean NOT NULL,
    sortable     boolean NOT NULL,
    PRIMARY KEY (container, environment, record_type, field_name),
    FOREIGN KEY (container, environment, record_type) REFERENCES schema_record_types ON DELETE CASCADE
);

CREATE TABLE schema_roles (
    container    text NOT NULL,
    environment  text NOT NULL,
    role_name    text NOT NULL,
    PRIMARY KEY (container, environment, role_name)
);

-- The users an operator assigned a custom role to (`stratus schema assign-role`), per environment
-- as the roles are. A server-to-server key acts as its user, so it holds the roles assigned to it.
CREATE TABLE schema_role_members (
    container         text NOT NULL,
    environment       text NOT NULL,
    role_name         text NOT NULL,
    user_record_name  text NOT NULL,
    PRIMARY KEY (container, environment, user_record_name, role_name)
);
