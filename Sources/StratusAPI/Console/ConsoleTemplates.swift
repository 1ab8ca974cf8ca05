import Mustache

/// The console's pages, as mustache templates kept in the source so a fresh clone builds and serves
/// them without resource bundles. `{{value}}` escapes HTML; nothing here uses the unescaped form.
enum ConsoleTemplates {
    /// The library every page renders with (the partials `head` and `foot` frame each page).
    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        for (name, text) in templates {
            // The templates are constants of this file: one that does not parse is a programming error
            // that the first test of any page shows.
            do { try library.register(text, named: name) } catch { preconditionFailure("console template \(name) does not parse: \(error)") }
        }
        return library
    }()

    static let templates: [(String, String)] = [
        ("head", head), ("foot", foot), ("signin", signin), ("home", home), ("message", message), ("container", container), ("zones", zones), ("records", records),
        ("record", record), ("query", query), ("operations", operations), ("access", access), ("identity", identity), ("sessions", sessions), ("subscriptions", subscriptions), ("errors", errors), ("audit", audit), ("schema", schema), ("schemaChange", schemaChange), ("run", run), ("runTable", runTable), ("hidden", hidden), ("recordTable", recordTable),
    ]

    static let head = """
        <!doctype html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <meta name="viewport" content="width=device-width, initial-scale=1">
        <title>{{title}} · Stratus console</title>
        {{#refresh}}<meta http-equiv="refresh" content="{{refresh}}">{{/refresh}}
        <style>
        :root { color-scheme: light dark; --accent: #2563eb; --muted: #6b7280; --line: #d1d5db; }
        * { box-sizing: border-box; }
        body { font: 16px/1.5 system-ui, sans-serif; margin: 0; }
        header { display: flex; flex-wrap: wrap; gap: .5rem 1rem; align-items: center; padding: .5rem 1rem; border-bottom: 1px solid var(--line); }
        header .brand { font-weight: 700; margin-right: auto; }
        nav.crumbs { padding: .5rem 1rem 0; font-size: .95rem; overflow-wrap: anywhere; }
        main { padding: 1rem; max-width: 72rem; }
        a { color: var(--accent); }
        a:focus, button:focus, input:focus, select:focus, textarea:focus { outline: 3px solid var(--accent); outline-offset: 2px; }
        label { display: block; font-weight: 600; margin-top: .5rem; }
        input, select, textarea, button { font: inherit; padding: .35rem .5rem; max-width: 100%; }
        textarea { width: 100%; min-height: 6rem; font-family: ui-monospace, monospace; }
        button { cursor: pointer; border: 1px solid var(--accent); background: var(--accent); color: #fff; border-radius: 4px; }
        button.secondary { background: transparent; color: var(--accent); }
        form.inline { display: inline; }
        .table { overflow-x: auto; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: .3rem .5rem; border-bottom: 1px solid var(--line); vertical-align: top; overflow-wrap: anywhere; }
        code, .mono { font-family: ui-monospace, monospace; font-size: .9em; }
        .muted { color: var(--muted); }
        .error { border: 1px solid #dc2626; padding: .5rem 1rem; border-radius: 4px; }
        .notice { border: 1px solid #16a34a; padding: .5rem 1rem; border-radius: 4px; }
        fieldset { border: 1px solid var(--line); border-radius: 4px; margin: 1rem 0; }
        @media (max-width: 40rem) { main { padding: .5rem; } th, td { padding: .25rem; } }
        </style>
        </head>
        <body>
        <header>
        <span class="brand">Stratus console</span>
        {{#signedIn}}
        <span>Signed in as <strong id="operator">{{signedIn}}</strong></span>
        <form class="inline" method="post" action="/console/signout">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <button type="submit" class="secondary">Sign out</button>
        </form>
        {{/signedIn}}
        </header>
        {{#hasCrumbs}}
        <nav class="crumbs" aria-label="Breadcrumb">{{#crumbs}}<a href="{{href}}">{{label}}</a> / {{/crumbs}}</nav>
        {{/hasCrumbs}}
        <main id="main">
        <h1>{{title}}</h1>
        {{#notice}}<p class="notice" role="status">{{notice}}</p>{{/notice}}
        """

    static let foot = """
        </main>
        </body>
        </html>
        """

    static let signin = """
        {{> head}}
        {{#error}}<p class="error" role="alert" id="signin-error">{{error}}</p>{{/error}}
        <form method="post" action="/console/signin">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="login">Login</label>
        <input id="login" name="login" autocomplete="username" required maxlength="255" value="{{login}}">
        <label for="password">Password</label>
        <input id="password" name="password" type="password" autocomplete="current-password" required maxlength="1024">
        <p><button type="submit" id="signin">Sign in</button></p>
        </form>
        {{> foot}}
        """

    static let home = """
        {{> head}}
        <p><a href="/console/operations" id="operations-link">Operations</a>: relay backlog, worker lag, dead letters ·
        <a href="/console/errors" id="errors-link">Recent errors</a>: search by request id ·
        <a href="/console/audit" id="audit-link">Audit log</a>: who changed what</p>
        {{^containers}}<p class="muted">No container to show.</p>{{/containers}}
        <ul id="containers">
        {{#containers}}<li><a href="{{href}}">{{name}}</a></li>{{/containers}}
        </ul>
        {{#more}}<p class="muted">Only the first {{shown}} are listed.</p>{{/more}}
        {{> foot}}
        """

    static let container = """
        {{> head}}
        <p><a href="/console/access?container={{containerQuery}}" id="access-link">Access</a>: API tokens, server-to-server keys, users</p>
        <p><a href="/console/schema?container={{containerQuery}}" id="schema-link">Schema</a>: record types, fields, index flags, security roles; deploy to production</p>
        <h2>Tenancy</h2>
        {{#suspendedAt}}<p>State: <strong id="container-state">suspended</strong> since {{suspendedAt}}: every request is refused (ACCESS_DENIED).</p>
        <form method="post" action="/console/tenancy/resume">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <button type="submit" id="resume-container">Resume</button>
        </form>{{/suspendedAt}}
        {{^suspendedAt}}<p>State: <strong id="container-state">serving</strong></p>
        <form method="post" action="/console/tenancy/suspend">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="suspend-reason">Why (kept in the audit log)</label>
        <input id="suspend-reason" name="reason" maxlength="255">
        <button type="submit" id="suspend-container" class="secondary">Suspend</button>
        </form>{{/suspendedAt}}
        <div class="table"><table id="usage">
        <thead><tr><th scope="col">Holds</th><th scope="col">Count</th></tr></thead>
        <tbody>{{#usage}}<tr><td>{{name}}</td><td>{{value}}</td></tr>{{/usage}}</tbody>
        </table></div>
        <form method="post" action="/console/tenancy/limits">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <fieldset>
        <legend>Limits (a number; 0: none; default: the process's setting, none for the container-wide max-records, max-zones, quota-bytes and asset-quota-bytes)</legend>
        {{#limits}}<label for="limit-{{name}}">{{name}}</label>
        <input id="limit-{{name}}" name="{{name}}" value="{{value}}" maxlength="32" class="mono">
        {{/limits}}
        <label for="public-records-heir">public-records-heir (the user record name who takes a deleted user's public records; none: they are deleted)</label>
        <input id="public-records-heir" name="public-records-heir" value="{{publicRecordsHeir}}" maxlength="255" class="mono">
        <p><button type="submit" id="change-limits">Change limits</button></p>
        </fieldset>
        </form>
        <form method="post" action="/console/tenancy/origins">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <fieldset>
        <legend>Allowed origins (CORS): the web pages that may call the API from a browser</legend>
        <label for="allowed-origins">One origin a line (scheme://host[:port]), at most 32; * alone: any origin</label>
        <textarea id="allowed-origins" name="allowed-origins" rows="4" maxlength="8192" class="mono">{{allowedOrigins}}</textarea>
        <p><button type="submit" id="change-origins">Change origins</button></p>
        </fieldset>
        </form>
        {{#deletingAt}}<p>Deletion: <strong id="container-deletion">{{deletion}}</strong>, started {{deletingAt}}: every request is refused (ACCESS_DENIED); stratus-gc (or <code>stratus container delete</code>) finishes it.</p>{{/deletingAt}}
        {{^deletingAt}}<form method="post" action="/console/tenancy/delete">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <fieldset>
        <legend>Delete the container: all its data, for good; every request is refused from the start</legend>
        <label for="delete-confirm">Type the container's identifier to confirm</label>
        <input id="delete-confirm" name="confirm" maxlength="255" class="mono" autocomplete="off">
        <p><button type="submit" id="delete-container" class="secondary">Delete the container</button></p>
        </fieldset>
        </form>{{/deletingAt}}
        <form method="get" action="/console/zones">
        <input type="hidden" name="container" value="{{container}}">
        <fieldset>
        <legend>Open a database</legend>
        <label for="environment">Environment</label>
        <select id="environment" name="environment">
        {{#environments}}<option value="{{name}}">{{name}}</option>{{/environments}}
        </select>
        <label for="database">Database</label>
        <select id="database" name="database">
        <option value="public">public</option>
        <option value="private">a user's private database</option>
        <option value="shared">a user's shared database (read-only)</option>
        </select>
        <label for="user">User record name (for a private or a shared database)</label>
        <input id="user" name="user" maxlength="255" placeholder="_3f9c…" class="mono">
        <p><button type="submit" id="open-database">Open</button></p>
        </fieldset>
        </form>
        {{> foot}}
        """

    /// The hidden fields that name the page's database (inside a form).
    static let hidden = """
        {{#hidden}}<input type="hidden" name="{{name}}" value="{{value}}">{{/hidden}}
        """

    static let zones = """
        {{> head}}
        <p class="muted">{{database}}</p>
        <h2>Zones</h2>
        <ul id="zones">
        {{#zones}}<li><a href="{{href}}">{{name}}</a>{{#owner}} <span class="muted">of <span class="mono">{{owner}}</span>, {{access}}</span>{{/owner}}</li>{{/zones}}
        </ul>
        {{#shared}}{{^zones}}<p class="muted" id="no-shared-zones">No zone is shared with this user (no share they accepted).</p>{{/zones}}
        <p class="muted">The shared database is shown read-only: the records the user reaches through the shares they accepted.</p>{{/shared}}
        {{#more}}<p class="muted">Only the first {{shown}} are listed.</p>{{/more}}
        {{#subscriptionsLink}}<p><a href="{{subscriptionsLink}}" id="subscriptions-link">Subscriptions and notifications of this user</a></p>{{/subscriptionsLink}}
        {{^shared}}<form method="post" action="/console/zones">
        <fieldset>
        <legend>Create a zone</legend>
        <input type="hidden" name="csrf" value="{{csrf}}">
        {{> hidden}}
        <label for="zoneName">Zone name</label>
        <input id="zoneName" name="zoneName" required maxlength="255">
        <p><button type="submit" id="create-zone">Create zone</button></p>
        </fieldset>
        </form>{{/shared}}
        {{> foot}}
        """

    /// Records as a table: name, type, and every field with its type.
    static let recordTable = """
        <div class="table"><table>
        <thead><tr><th scope="col">Record name</th><th scope="col">Type</th><th scope="col">Fields (type: value)</th><th scope="col">Modified</th></tr></thead>
        <tbody>
        {{#rows}}<tr><td><a href="{{href}}" class="mono">{{recordName}}</a></td><td>{{recordType}}</td>
        <td>{{#fields}}<div><code>{{name}}</code> <span class="muted">{{type}}</span>: <code>{{value}}</code></div>{{/fields}}</td>
        <td class="muted">{{modified}}</td></tr>{{/rows}}
        </tbody>
        </table></div>
        """

    static let records = """
        {{> head}}
        <p class="muted">{{database}}</p>
        <form method="get" action="/console/records" class="inline">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <label for="lookup">Look up a record by name</label>
        <input id="lookup" name="lookup" required maxlength="255" class="mono">
        <button type="submit" id="lookup-record">Look up</button>
        </form>
        <h2>Records</h2>
        {{#empty}}<p class="muted" id="no-records">No records.</p>{{/empty}}
        <div id="records">{{> recordTable}}</div>
        <p>{{#first}}<a href="{{first}}">First page</a> {{/first}}{{#next}}<a href="{{next}}" id="next-page">Next {{pageSize}}</a>{{/next}}</p>
        {{^shared}}<form method="get" action="/console/query">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <p><button type="submit" class="secondary" id="open-query">Query this zone</button></p>
        </form>
        <form method="post" action="/console/record/save">
        <fieldset>
        <legend>Create a record</legend>
        <input type="hidden" name="csrf" value="{{csrf}}">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <label for="recordName">Record name (empty: a new id)</label>
        <input id="recordName" name="recordName" maxlength="255" class="mono">
        <label for="recordType">Record type</label>
        <input id="recordType" name="recordType" required maxlength="255">
        <label for="fields">Fields (JSON, as records/modify takes them)</label>
        <textarea id="fields" name="fields" placeholder='{"title": {"value": "Hello"}}'></textarea>
        <p><button type="submit" id="create-record">Create record</button></p>
        </fieldset>
        </form>{{/shared}}
        {{#shared}}<p class="muted" id="read-only">Read-only: the records of this zone the user reaches through the shares they accepted (a page may list fewer than {{pageSize}}).</p>{{/shared}}
        {{> foot}}
        """

    static let record = """
        {{> head}}
        <dl>
        <dt>Record type</dt><dd id="record-type">{{recordType}}</dd>
        <dt>Change tag</dt><dd class="mono">{{changeTag}}</dd>
        <dt>Created</dt><dd>{{created}}</dd>
        <dt>Modified</dt><dd>{{modified}}</dd>
        {{#expiration}}<dt>Expires</dt><dd>{{expiration}}</dd>{{/expiration}}
        </dl>
        <h2>Fields</h2>
        <div class="table"><table id="fields-table">
        <thead><tr><th scope="col">Field</th><th scope="col">Type</th><th scope="col">Value</th></tr></thead>
        <tbody>
        {{#fields}}<tr><td><code>{{name}}</code></td><td>{{type}}</td><td><code>{{value}}</code></td></tr>{{/fields}}
        </tbody>
        </table></div>
        {{^shared}}<form method="post" action="/console/record/save">
        <fieldset>
        <legend>Edit</legend>
        <input type="hidden" name="csrf" value="{{csrf}}">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <input type="hidden" name="recordName" value="{{recordName}}">
        <input type="hidden" name="recordType" value="{{recordType}}">
        <input type="hidden" name="changeTag" value="{{changeTag}}">
        <label for="fields">Fields to change (JSON; <code>{}</code> as a value removes a field)</label>
        <textarea id="fields" name="fields">{{fieldsJSON}}</textarea>
        <p><button type="submit" id="save-record">Save</button></p>
        </fieldset>
        </form>
        <form method="post" action="/console/record/delete">
        <input type="hidden" name="csrf" value="{{csrf}}">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <input type="hidden" name="recordName" value="{{recordName}}">
        <input type="hidden" name="changeTag" value="{{changeTag}}">
        <p><button type="submit" class="secondary" id="delete-record">Delete record</button></p>
        </form>{{/shared}}
        {{> foot}}
        """

    static let query = """
        {{> head}}
        <p class="muted">{{database}} · zone {{zone}}</p>
        <form method="get" action="/console/query">
        {{> hidden}}<input type="hidden" name="zone" value="{{zone}}">
        <fieldset>
        <legend>Query</legend>
        <label for="recordType">Record type</label>
        <input id="recordType" name="recordType" required maxlength="255" value="{{recordType}}">
        <label for="field">Filter: field</label>
        <input id="field" name="field" maxlength="255" value="{{field}}">
        <label for="comparator">Comparator</label>
        <select id="comparator" name="comparator">{{#comparators}}<option{{#selected}} selected{{/selected}}>{{name}}</option>{{/comparators}}</select>
        <label for="value">Value</label>
        <input id="value" name="value" maxlength="1024" value="{{value}}">
        <label for="valueType">Value type</label>
        <select id="valueType" name="valueType">{{#valueTypes}}<option{{#selected}} selected{{/selected}}>{{name}}</option>{{/valueTypes}}</select>
        <label for="sort">Sort by field</label>
        <input id="sort" name="sort" maxlength="255" value="{{sort}}">
        <label for="order">Order</label>
        <select id="order" name="order"><option value="ascending">ascending</option><option value="descending"{{#descending}} selected{{/descending}}>descending</option></select>
        <p><button type="submit" id="run-query">Run query</button></p>
        </fieldset>
        </form>
        {{#ran}}
        <h2>Results</h2>
        <p id="result-count">{{count}} records{{#more}} (the first {{pageSize}}){{/more}}</p>
        <div id="results">{{> recordTable}}</div>
        {{/ran}}
        {{> foot}}
        """

    static let operations = """
        {{> head}}
        <h2>Relay</h2>
        <p id="backlog">Backlog: <strong>{{backlog}}</strong> events not yet published (the oldest {{backlogAge}} s old).</p>
        <h2>Workers</h2>
        <div class="table"><table id="workers">
        <thead><tr><th scope="col">Worker</th><th scope="col">Lag (events)</th><th scope="col">Zones behind</th><th scope="col">Applied (events)</th><th scope="col">Applied per second</th><th scope="col">Dead letters</th></tr></thead>
        <tbody>
        {{#workers}}<tr id="worker-{{worker}}"><th scope="row">{{worker}}</th><td class="lag">{{lag}}</td><td>{{zonesBehind}}</td><td>{{applied}}</td><td>{{rate}}</td><td>{{deadLetters}}</td></tr>{{/workers}}
        </tbody>
        </table></div>
        <p class="muted">From the workers' checkpoints in custom zones; the rate is between this view and the one before. Reload to add a sample ({{samples}} so far).</p>
        {{#charts}}
        <figure>
        <svg id="{{id}}" role="img" aria-labelledby="{{id}}-title" viewBox="0 0 {{width}} {{height}}" width="100%" style="max-width: {{width}}px; border: 1px solid var(--line);">
        <title id="{{id}}-title">{{label}}</title>
        <text x="4" y="14" font-size="12" fill="currentColor">{{top}}</text>
        <text x="4" y="{{height}}" dy="-4" font-size="12" fill="currentColor">0</text>
        {{#lines}}<polyline fill="none" stroke="{{color}}" stroke-width="2" points="{{points}}"><title>{{worker}}</title></polyline>{{/lines}}
        </svg>
        <figcaption>{{label}}: {{#lines}}<span style="color: {{color}}">■</span> {{worker}} {{/lines}}· the last {{seconds}} s</figcaption>
        </figure>
        {{/charts}}
        <h2>Dead letters</h2>
        {{#noDeadLetters}}<p class="muted" id="no-dead-letters">No dead letters.</p>{{/noDeadLetters}}
        <div class="table"><table id="dead-letters">
        <thead><tr><th scope="col">Id</th><th scope="col">Worker</th><th scope="col">Event</th><th scope="col">Zone</th><th scope="col">Reason</th><th scope="col">When</th><th scope="col">Action</th></tr></thead>
        <tbody>
        {{#deadLetters}}<tr id="dead-letter-{{id}}"><td>{{id}}</td><td>{{worker}}</td><td>{{event}}</td><td class="mono">{{zone}}</td><td>{{reason}}</td><td class="muted">{{at}}</td>
        <td><form class="inline" method="post" action="/console/operations/dead-letters/retry"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" id="retry-{{id}}" aria-label="Retry dead letter {{id}}">Retry</button></form>
        <form class="inline" method="post" action="/console/operations/dead-letters/discard"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="id" value="{{id}}"><button type="submit" class="secondary" id="discard-{{id}}" aria-label="Discard dead letter {{id}}">Discard</button></form></td></tr>{{/deadLetters}}
        </tbody>
        </table></div>
        {{#older}}<p><a href="{{older}}">Older {{pageSize}}</a></p>{{/older}}
        <h2>Reindex and replay</h2>
        {{#canStart}}
        <form method="post" action="/console/operations/runs">
        <input type="hidden" name="csrf" value="{{csrf}}">
        <label for="run-job">Job</label>
        <select id="run-job" name="job">{{#jobs}}<option value="{{name}}">{{label}}</option>{{/jobs}}</select>
        <button type="submit" id="start-run">Start</button>
        </form>
        <p class="muted">A reindex builds a new query index generation from the event log while the live one answers, then swaps it in. A replay rebuilds a worker's state from the event log and then moves its consumer group to where the log ended when the replay began; stop the worker first, or it keeps its own position (its checkpoints keep it correct), exactly as <code>stratus replay</code>. One run of each kind at a time.</p>
        {{/canStart}}
        {{^canStart}}<p class="muted" id="runs-unavailable">This process cannot start runs; use <code>stratus reindex</code> and <code>stratus replay</code>.</p>{{/canStart}}
        {{> runTable}}
        {{> foot}}
        """

    static let runTable = """
        <div class="table"><table id="runs">
        <thead><tr><th scope="col">Run</th><th scope="col">Job</th><th scope="col">State</th><th scope="col">Events read</th><th scope="col">Event id reached</th><th scope="col">Started</th><th scope="col">Finished</th><th scope="col">Started by</th></tr></thead>
        <tbody>
        {{#runs}}<tr id="run-{{id}}"><td><a href="{{href}}">{{id}}</a></td><td>{{job}}</td><td class="state">{{state}}</td><td>{{events}}</td><td>{{position}} of {{target}}</td><td class="muted">{{started}}</td><td class="muted">{{finished}}</td><td>{{startedBy}}</td></tr>{{/runs}}
        </tbody>
        </table></div>
        {{^runs}}<p class="muted" id="no-runs">No runs yet.</p>{{/runs}}
        """

    static let run = """
        {{> head}}
        <p>Run <strong>{{id}}</strong>: {{job}}, started by {{startedBy}} at {{started}}.</p>
        <p role="status" aria-live="polite">State: <strong id="run-state">{{state}}</strong>{{#finished}} at <span id="run-finished">{{finished}}</span>{{/finished}}.
        <span id="run-events">{{events}}</span> events read; event id <span id="run-position">{{position}}</span> of <span id="run-target">{{target}}</span> ({{percent}} %).</p>
        <progress id="run-progress" max="{{progressMax}}" value="{{progressValue}}">{{percent}} %</progress>
        {{#error}}<p class="error" id="run-error">{{error}}</p>{{/error}}
        {{#stale}}<p class="error" id="run-stale">It has not reported since {{reported}}: its process may have stopped. The next run started marks it failed.</p>{{/stale}}
        {{#running}}<p class="muted">The page reloads every {{refreshSeconds}} s while the run runs; the numbers are what the run last recorded (at {{reported}}).</p>{{/running}}
        <p><a href="/console/operations">Back to operations</a></p>
        {{> foot}}
        """

    static let access = """
        {{> head}}
        <p><a href="{{identityLink}}" id="identity-link">Sign-in</a>: sign-up by email, invitations, trusted issuers</p>
        {{#newToken}}<p class="notice" role="status">The new API token — copy it now, it is not shown again: <code id="new-token">{{newToken}}</code></p>{{/newToken}}
        <h2>API tokens</h2>
        <div class="table"><table id="tokens">
        <thead><tr><th scope="col">Digest</th><th scope="col">Label</th><th scope="col">Created</th><th scope="col">Action</th></tr></thead>
        <tbody>
        {{#tokens}}<tr><td class="mono" title="{{digest}}">{{short}}…</td><td>{{label}}</td><td class="muted">{{created}}</td>
        <td><form class="inline" method="post" action="/console/access/tokens/revoke"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="digest" value="{{digest}}"><button type="submit" class="secondary" aria-label="Revoke API token {{short}}">Revoke</button></form></td></tr>{{/tokens}}
        </tbody></table></div>
        <form method="post" action="/console/access/tokens/create">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="token-label">Label of a new API token</label>
        <input id="token-label" name="label" maxlength="255">
        <button type="submit" id="create-token">Create API token</button>
        </form>
        <h2>Server-to-server keys</h2>
        <div class="table"><table id="keys">
        <thead><tr><th scope="col">Key id</th><th scope="col">Label</th><th scope="col">Created</th><th scope="col">State</th></tr></thead>
        <tbody>
        {{#keys}}<tr><td class="mono" title="{{keyID}}">{{short}}…</td><td>{{label}}</td><td class="muted">{{created}}</td>
        <td>{{#revoked}}revoked {{revoked}}{{/revoked}}{{^revoked}}<form class="inline" method="post" action="/console/access/keys/revoke"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="keyID" value="{{keyID}}"><button type="submit" class="secondary" aria-label="Revoke key {{short}}">Revoke</button></form>{{/revoked}}</td></tr>{{/keys}}
        </tbody></table></div>
        <form method="post" action="/console/access/keys/create">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="key-label">Label</label>
        <input id="key-label" name="label" maxlength="255">
        <label for="public-key">P-256 public key (PEM)</label>
        <textarea id="public-key" name="publicKey" required placeholder="-----BEGIN PUBLIC KEY-----"></textarea>
        <button type="submit" id="register-key">Register key</button>
        </form>
        <h2>Users</h2>
        <div class="table"><table id="users">
        <thead><tr><th scope="col">Login</th><th scope="col">User record name</th><th scope="col">Created</th><th scope="col">Sessions</th><th scope="col">Delete</th></tr></thead>
        <tbody>
        {{#users}}<tr><td>{{login}}</td><td class="mono">{{userRecordName}}</td><td class="muted">{{created}}</td><td><a href="{{sessions}}">Sessions</a></td>
        <td><form class="inline" method="post" action="/console/access/users/delete"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="userRecordName" value="{{userRecordName}}"><button type="submit" class="secondary" aria-label="Delete user {{login}} and all their data">Delete…</button></form></td></tr>{{/users}}
        </tbody></table></div>
        {{#moreUsers}}<p><a href="{{moreUsers}}">Next {{pageSize}} users</a></p>{{/moreUsers}}
        <form method="post" action="/console/access/users/create">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="user-login">Login of a new user</label>
        <input id="user-login" name="login" required maxlength="255" autocomplete="off">
        <label for="user-password">Password (at least 8 characters)</label>
        <input id="user-password" name="password" type="password" required minlength="8" maxlength="1024" autocomplete="new-password">
        <button type="submit" id="create-user">Add user</button>
        </form>
        {{> foot}}
        """

    static let identity = """
        {{> head}}
        <h2>Sign-up by email</h2>
        <p>Now: <strong id="sign-up-mode">{{signUp}}</strong>{{^sendsEmail}} <span class="muted">(this server sends no email: sign-up and reset are refused until STRATUS_SMTP_HOST or STRATUS_EMAIL_WEBHOOK_URL is set)</span>{{/sendsEmail}}</p>
        <form method="post" action="/console/access/sign-up">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="sign-up">Who may sign up</label>
        <select id="sign-up" name="mode">{{#modes}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/modes}}</select>
        <button type="submit" id="change-sign-up">Change</button>
        </form>
        <h3>Invitations</h3>
        <div class="table"><table id="invitations">
        <thead><tr><th scope="col">Address</th><th scope="col">Action</th></tr></thead>
        <tbody>
        {{#invitations}}<tr><td>{{email}}</td><td><form class="inline" method="post" action="/console/access/invitations/remove"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="email" value="{{email}}"><button type="submit" class="secondary" aria-label="Withdraw the invitation of {{email}}">Withdraw</button></form></td></tr>{{/invitations}}
        </tbody></table></div>
        <form method="post" action="/console/access/invitations/create">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="invite-email">Address to invite</label>
        <input id="invite-email" name="email" type="email" required maxlength="254">
        <button type="submit" id="invite">Invite</button>
        </form>
        <h2>Trusted issuers</h2>
        <div class="table"><table id="issuers">
        <thead><tr><th scope="col">Issuer</th><th scope="col">Key set</th><th scope="col">Client ids</th><th scope="col">Hosted page</th><th scope="col">Action</th></tr></thead>
        <tbody>
        {{#issuers}}<tr><td class="mono">{{issuer}}</td><td class="mono">{{keySetURL}}</td><td>{{audiences}}</td><td>{{web}}</td><td><form class="inline" method="post" action="/console/access/issuers/remove"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="issuer" value="{{issuer}}"><button type="submit" class="secondary" aria-label="Stop trusting {{issuer}}">Remove</button></form></td></tr>{{/issuers}}
        </tbody></table></div>
        <form method="post" action="/console/access/issuers/add">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <label for="issuer">Issuer (its tokens' iss)</label>
        <input id="issuer" name="issuer" required maxlength="255" placeholder="https://appleid.apple.com">
        <label for="jwks-url">Key set (JWKS) URL</label>
        <input id="jwks-url" name="jwksURL" required maxlength="2048" placeholder="https://appleid.apple.com/auth/keys">
        <label for="audiences">Client ids (audiences), separated by commas</label>
        <input id="audiences" name="audiences" required maxlength="2048">
        <label for="web-client-id">Web client id: the hosted sign-in page signs in with it (one of the client ids; empty: from the app only)</label>
        <input id="web-client-id" name="webClientID" maxlength="255">
        <label for="authorization-url">Authorization URL (empty: from the issuer's discovery document)</label>
        <input id="authorization-url" name="authorizationURL" maxlength="2048">
        <label for="redirect-url">Redirect URL registered at the issuer (empty: the server's callback)</label>
        <input id="redirect-url" name="redirectURL" maxlength="2048">
        <label for="token-url">Token URL: the page signs in with the authorization-code flow and PKCE, exchanging the code there (empty: the ID token comes back with the browser)</label>
        <input id="token-url" name="tokenURL" maxlength="2048">
        <label for="client-secret">Client secret sent to the token URL (empty: none; never shown again)</label>
        <input id="client-secret" name="clientSecret" type="password" autocomplete="off" maxlength="1024">
        <button type="submit" id="trust-issuer">Trust issuer</button>
        </form>
        {{> foot}}
        """

    static let sessions = """
        {{> head}}
        <div class="table"><table id="sessions">
        <thead><tr><th scope="col">Session</th><th scope="col">Method</th><th scope="col">Created</th><th scope="col">Expires</th><th scope="col">State</th></tr></thead>
        <tbody>
        {{#sessions}}<tr><td class="mono">{{sessionID}}</td><td>{{method}}{{#issuer}} <span class="muted">{{issuer}}</span>{{/issuer}}</td><td class="muted">{{created}}</td><td class="muted">{{expires}}</td>
        <td>{{#active}}<form class="inline" method="post" action="/console/access/sessions/revoke"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="user" value="{{user}}"><input type="hidden" name="sessionID" value="{{sessionID}}"><button type="submit" class="secondary" aria-label="Revoke session {{sessionID}}">Revoke</button></form>{{/active}}{{^active}}{{#revoked}}revoked {{revoked}}{{/revoked}}{{^revoked}}expired{{/revoked}}{{/active}}</td></tr>{{/sessions}}
        </tbody></table></div>
        <form method="post" action="/console/access/sessions/revoke-all">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="user" value="{{user}}">
        <button type="submit" id="revoke-all">Sign the user out everywhere</button>
        </form>
        {{> foot}}
        """

    static let subscriptions = """
        {{> head}}
        <p class="muted">{{environment}}</p>
        <h2>Subscriptions</h2>
        {{#noSubscriptions}}<p class="muted" id="no-subscriptions">No subscriptions.</p>{{/noSubscriptions}}
        <div class="table"><table id="subscriptions">
        <thead><tr><th scope="col">Id</th><th scope="col">Type</th><th scope="col">Database</th><th scope="col">Zone</th><th scope="col">Record type</th><th scope="col">Definition</th></tr></thead>
        <tbody>
        {{#subscriptions}}<tr><td class="mono">{{id}}</td><td>{{type}}</td><td>{{scope}}</td><td>{{zone}}</td><td>{{recordType}}</td><td><code>{{definition}}</code></td></tr>{{/subscriptions}}
        </tbody></table></div>
        <h2>Notifications</h2>
        {{#noNotifications}}<p class="muted" id="no-notifications">No notifications.</p>{{/noNotifications}}
        <div class="table"><table id="notifications">
        <thead><tr><th scope="col">Position</th><th scope="col">Type</th><th scope="col">Subscription</th><th scope="col">Zone / record</th><th scope="col">When</th><th scope="col">Deliveries (channel, target: state, attempts)</th></tr></thead>
        <tbody>
        {{#notifications}}<tr id="notification-{{position}}"><td>{{position}} <span class="muted">{{read}}</span></td><td>{{type}} {{reason}}</td><td class="mono">{{subscription}}</td><td>{{zone}} {{record}}</td><td class="muted">{{created}}</td>
        <td>{{#noDeliveries}}<span class="muted">no push target</span>{{/noDeliveries}}{{#deliveries}}<div class="delivery">{{channel}} <span class="mono">{{target}}</span>: <strong>{{state}}</strong>, {{attempts}} attempts{{#error}} — {{error}}{{/error}}</div>{{/deliveries}}</td></tr>{{/notifications}}
        </tbody></table></div>
        {{#older}}<p><a href="{{older}}">Older {{pageSize}}</a></p>{{/older}}
        {{> foot}}
        """

    static let errors = """
        {{> head}}
        <form method="get" action="/console/errors">
        <label for="requestID">Request id (or its beginning)</label>
        <input id="requestID" name="requestID" maxlength="128" class="mono" value="{{requestID}}">
        <button type="submit" id="search-errors">Search</button>
        </form>
        <p class="muted">The latest {{capacity}} error answers of this stratus-api process, newest first (at most {{pageSize}} shown).</p>
        {{#none}}<p class="muted" id="no-errors">No errors.</p>{{/none}}
        <div class="table"><table id="errors">
        <thead><tr><th scope="col">When</th><th scope="col">Request id</th><th scope="col">Request</th><th scope="col">Status</th><th scope="col">Code and reason</th></tr></thead>
        <tbody>
        {{#errors}}<tr><td class="muted">{{at}}</td><td class="mono">{{requestID}}</td><td><code>{{method}} {{path}}</code></td><td>{{status}}</td><td>{{code}} {{reason}}</td></tr>{{/errors}}
        </tbody></table></div>
        {{> foot}}
        """

    static let audit = """
        {{> head}}
        <form method="get" action="/console/audit">
        <label for="audit-container">Container</label>
        <input id="audit-container" name="container" maxlength="255" value="{{container}}">
        <label for="audit-actor">Actor</label>
        <input id="audit-actor" name="actor" maxlength="255" value="{{actor}}">
        <label for="audit-action">Action</label>
        <select id="audit-action" name="action"><option value="">any</option>
        {{#actions}}<option value="{{name}}"{{#selected}} selected{{/selected}}>{{name}}</option>{{/actions}}
        </select>
        <button type="submit" id="search-audit">Filter</button>
        </form>
        <p class="muted">Administrative actions of the admin CLI and the console, newest first ({{pageSize}} a page). <code>stratus audit verify</code> checks the hash chain.</p>
        {{#none}}<p class="muted" id="no-audit">No entries.</p>{{/none}}
        <div class="table"><table id="audit">
        <thead><tr><th scope="col">#</th><th scope="col">When</th><th scope="col">Who</th><th scope="col">From</th><th scope="col">Action</th><th scope="col">Container</th><th scope="col">Subject</th><th scope="col">Details</th><th scope="col">Request id</th></tr></thead>
        <tbody>
        {{#entries}}<tr><td>{{sequence}}</td><td class="muted">{{at}}</td><td>{{actor}} <span class="muted">({{channel}})</span></td><td class="mono">{{origin}}</td><td class="mono">{{action}}</td><td>{{container}}</td><td class="mono">{{subject}}</td><td>{{details}}</td><td class="mono">{{requestID}}</td></tr>{{/entries}}
        </tbody></table></div>
        {{#older}}<p><a href="{{older}}" id="audit-older">Older {{pageSize}}</a></p>{{/older}}
        {{> foot}}
        """

    static let schema = """
        {{> head}}
        <div style="display: grid; grid-template-columns: repeat(auto-fit, minmax(22rem, 1fr)); gap: 1rem">
        {{#environments}}<section id="schema-{{name}}" aria-labelledby="heading-{{name}}">
        <h2 id="heading-{{name}}">{{name}}</h2>
        <p class="muted">{{state}}</p>
        <h3>Security roles</h3>
        {{#noRoles}}<p class="muted">No custom roles (only _world, _icloud, _creator).</p>{{/noRoles}}
        <ul class="roles">{{#roles}}<li><code>{{role}}</code>{{#members}} · <span class="mono">{{user}}</span>
        <form class="inline" method="post" action="/console/schema/roles"><input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="environment" value="{{name}}"><input type="hidden" name="role" value="{{role}}"><input type="hidden" name="user" value="{{user}}"><input type="hidden" name="remove" value="true"><button type="submit" class="secondary" aria-label="Take {{role}} away from {{user}}">Remove</button></form>{{/members}}</li>{{/roles}}</ul>
        {{^noRoles}}<form method="post" action="/console/schema/roles">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}"><input type="hidden" name="environment" value="{{name}}">
        <label for="role-{{name}}">Role</label>
        <select id="role-{{name}}" name="role">{{#roles}}<option value="{{role}}">{{role}}</option>{{/roles}}</select>
        <label for="role-user-{{name}}">User record name</label>
        <input id="role-user-{{name}}" name="user" required maxlength="255" class="mono">
        <button type="submit" id="assign-role-{{name}}">Assign role in {{name}}</button>
        </form>{{/noRoles}}
        <h3>Record types</h3>
        {{#noTypes}}<p class="muted">No record types.</p>{{/noTypes}}
        {{#more}}<p class="muted">Only the first {{maxRecordTypes}} are listed; the schema file below has them all.</p>{{/more}}
        {{#recordTypes}}<h4><code>{{type}}</code></h4>
        <div class="table"><table class="fields">
        <caption class="muted">Fields of {{type}}</caption>
        <thead><tr><th scope="col">Field</th><th scope="col">Type</th><th scope="col">Indexes</th></tr></thead>
        <tbody>
        {{#fields}}<tr><td class="mono{{#system}} muted{{/system}}">{{field}}</td><td class="mono">{{fieldType}}</td><td class="mono">{{indexes}}</td></tr>{{/fields}}
        </tbody></table></div>
        <ul class="grants">{{#grants}}<li><code>GRANT {{permissions}} TO {{role}}</code></li>{{/grants}}</ul>
        {{/recordTypes}}
        <details open><summary>Schema file (.ckdb)</summary>
        {{#cut}}<p class="muted">Too long to show whole: stratus schema export prints it all.</p>{{/cut}}
        <pre class="mono" id="ckdb-{{name}}" style="overflow-x: auto">{{ckdb}}</pre>
        </details>
        </section>{{/environments}}
        </div>
        <h2>Change</h2>
        <p class="muted">Each shows what it would do and asks to confirm before anything changes.</p>
        <form class="inline" method="post" action="/console/schema/deploy">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <button type="submit" id="check-deploy">Deploy development to production…</button>
        </form>
        <form class="inline" method="post" action="/console/schema/reset">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <button type="submit" class="secondary" id="check-reset">Reset development to production…</button>
        </form>
        {{> foot}}
        """

    static let schemaChange = """
        {{> head}}
        {{#refused}}<p class="error" role="alert" id="refused">Refused: it would lose data production holds. Nothing was changed.</p>
        <ul id="problems">{{#problems}}<li>{{text}}</li>{{/problems}}</ul>{{/refused}}
        {{^refused}}<p id="check">{{intro}}</p>
        {{#noChanges}}<p class="muted" id="no-changes">No record type, field, index, role or grant would change.</p>{{/noChanges}}
        <ul id="changes">{{#changes}}<li>{{text}}</li>{{/changes}}</ul>
        <form method="post" action="{{action}}">
        <input type="hidden" name="csrf" value="{{csrf}}"><input type="hidden" name="container" value="{{container}}">
        <input type="hidden" name="confirm" value="{{confirm}}">
        <button type="submit" id="confirm">Confirm: {{label}}</button>
        </form>{{/refused}}
        <p><a href="{{back}}" id="back">Back to the schema</a></p>
        {{> foot}}
        """

    static let message = """
        {{> head}}
        <p class="error" role="alert" id="message">{{message}}</p>
        {{#back}}<p><a href="{{back}}">Back</a></p>{{/back}}
        {{> foot}}
        """
}
