---@meta efmesh
-- LuaLS type definitions for efmesh model files. `efmesh init` writes this file to
-- `.efmesh/lua/efmesh.d.lua` and a `.luarc.json` that points the language server at it, so
-- editors complete the API and flag typos.

---A model handle returned by `define_model`; pass it to `ref` and `cols`.
---@class efmesh.Model
---@field name string `schema.table`

---@alias efmesh.Parent efmesh.Model|string  A handle or a `"schema.table"` name.

---A kind value built by one of the `kind` constructors.
---@class efmesh.Kind
---@field kind "full"|"view"|"embedded"|"incremental_by_time_range"|"external"|"incremental_by_unique_key"|"scd_type2"|"seed"|"incremental_by_partition"

---@class efmesh.TimeRangeOptions
---@field time_column string Output column holding each row's instant (declared in `schema`).
---@field start string First instant, UTC: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` or RFC 3339.
---@field end? string Exclusive end of history; no interval starts at or after it.
---@field grain? "5m"|"15m"|"hour"|"day"|"week"|"month" Interval width (default `day`; `week` starts on Monday, `month` is the calendar month).
---@field batch_size? integer Intervals per engine transaction (default 30).
---@field lookback? integer Intervals recomputed before every missing one (default 0).
---@field auto_restatement_intervals? integer Done intervals before the newest due one that every `efmesh run` computing it recomputes, with its descendants (default 0).

---@class efmesh.ExternalOptions
---@field table? string An engine relation `schema.table` (instead of `path`).
---@field path? string A file, a glob or a URL (`https://…`, `s3://…`); relative paths resolve against the project directory.
---@field format? "csv"|"parquet"|"json" Inferred from the extension when absent.
---@field null_markers? string[] CSV values read as NULL (e.g. `{ "NA" }`).
---@field union_by_name? boolean Reader option for globs of files with differing columns.
---@field hive_partitioning? boolean Reader option: read `key=value` directories as columns.
---@field delimiter? string CSV field delimiter, one character (sniffed when absent).
---@field header? boolean CSV: whether the first line names the columns (default true; without it the declared columns name the fields in order).

---@class efmesh.SeedOptions
---@field path string One CSV or JSON file, relative to the project directory; its content is fingerprinted.
---@field format? "csv"|"json" Inferred from the extension (`.csv`, `.tsv`, `.json`, `.jsonl`, `.ndjson`) when absent.
---@field null_markers? string[] Unquoted CSV values read as NULL besides the empty field (e.g. `{ "NA" }`); a quoted `"NA"` stays text.
---@field delimiter? string CSV field delimiter, one ASCII character (default `,`, a tab for `.tsv`).

---@class efmesh.UniqueKeyOptions
---@field key string|string[] Declared column(s) identifying a row; NULL or duplicate keys are refused.

---@class efmesh.PartitionOptions
---@field partitioned_by string|string[] Declared column(s) whose values name a partition (NULL included).

---@class efmesh.ScdType2Options
---@field key string|string[] Declared column(s) identifying an entity; NULL or duplicate keys are refused.
---@field valid_from? string Managed column: when a version became current (default `valid_from`; do not declare it).
---@field valid_to? string Managed column: when a version stopped being current, NULL while it is (default `valid_to`).
---@field columns? string[] Watched columns whose change opens a new version (default: every non-key column).
---@field invalidate_hard_deletes? boolean Close the open version of a key the source no longer returns (default true).
---@field renamed? table<string, string> Column renames `{ old = "new" }`: the new version's table starts from the old history, the column renamed.

---@class efmesh.KindConstructors
kind = {}

---Rebuilt as a whole table whenever the model's version changes.
---@return efmesh.Kind
function kind.full() end

---A view in the physical schema.
---@return efmesh.Kind
function kind.view() end

---Never materialised: inlined as a subquery wherever it is referenced.
---@return efmesh.Kind
function kind.embedded() end

---Built interval by interval over `time_column`; the query uses `@start` and `@end`.
---@param opts efmesh.TimeRangeOptions
---@return efmesh.Kind
function kind.incremental_by_time_range(opts) end

---Raw data read in place; never built. Give `table` or `path`.
---@param opts efmesh.ExternalOptions
---@return efmesh.Kind
function kind.external(opts) end

---A table upserted by `key` when built and on every `efmesh run`; rows absent from the query stay.
---@param opts efmesh.UniqueKeyOptions
---@return efmesh.Kind
function kind.incremental_by_unique_key(opts) end

---A table whose partitions present in the query's output replace the stored ones when built and
---on every `efmesh run`; partitions absent from the output keep their rows.
---@param opts efmesh.PartitionOptions
---@return efmesh.Kind
function kind.incremental_by_partition(opts) end

---A history table reconciled by `key` when built and on every `efmesh run`: a changed watched column
---closes the open version and opens a new one; efmesh adds `valid_from`/`valid_to` (TIMESTAMP, UTC).
---@param opts efmesh.ScdType2Options
---@return efmesh.Kind
function kind.scd_type2(opts) end

---A CSV or JSON file loaded into a table; editing the file makes a new version. No query.
---@param opts efmesh.SeedOptions
---@return efmesh.Kind
function kind.seed(opts) end

---@class efmesh.ModelSpec
---@field name string `<schema>.<table>`, identifiers only.
---@field kind efmesh.Kind A `kind.*` constructor.
---@field schema string[][] Ordered `{ "column", "duckdb type" }` pairs: the output contract.
---@field query? string|fun(): string The SQL (not for externals and seeds). `@start`/`@end` in time-range models.
---@field grain? string[] Columns identifying a row.
---@field description? string Free text.
---@field target? "table"|"parquet"|"ducklake" Where the data is stored (default `table`); `full` and time-range models only.
---@field audits? efmesh.AuditUse[] Audits checked when data is written (`audit.not_null("id")`, …); not fingerprinted.
---@field cron? string When the model is due, UTC: a time-range model's intervals, or when `run` refreshes a full/unique-key/partition/SCD2 model (`"*/15 * * * *"`, `"@daily"`); not fingerprinted.
---@field pre_statements? string|string[] SQL run before the model's write, in its transaction (`@this`, bounds allowed).
---@field post_statements? string|string[] SQL run after the write, in the same transaction.
---@field statements_affect_data? boolean `true`: the statements are fingerprinted (an edit rebuilds). Default `false`.
---@field owner? string Who answers for the model; not fingerprinted.
---@field tags? string[] Labels, selectable with `tag:`; not fingerprinted.
---@field column_descriptions? table<string, string> Column → description; not fingerprinted.
---@field ignored_lints? string[] `efmesh check` lint rules not run on this model.
---@field signals? (string|table)[] Time-range models: signals deciding which intervals `run` computes (`{ "name", key = value }`).

---Defines a model and returns its handle.
---@param spec efmesh.ModelSpec
---@return efmesh.Model
function define_model(spec) end

---A reference to another model, rendered as the right relation at plan, apply and render time.
---@param parent efmesh.Parent
---@return string
function ref(parent) end

---A checked, quoted column list of `parent`; with no names, every declared column.
---@param parent efmesh.Parent
---@param ... string
---@return string
function cols(parent, ...) end

---A row of a unit test: column = value. A column left out (or `nil`) is NULL; values are typed
---by the declared schema of the model owning the column (`"2024-01-01"` in a `date` column).
---@alias efmesh.Row table<string, boolean|number|string|table>

---The interval of a time-range model's test: the values of `@start` / `@end`, `[start, end)`.
---@class efmesh.TestVars
---@field start string UTC: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` or RFC 3339.
---@field end string Exclusive, same forms (write `["end"] = …`).

---A unit test (test files only, `project.tests`; see docs/testing.md).
---@class efmesh.TestSpec
---@field name string Unique test name; `efmesh test NAME` runs it.
---@field model efmesh.Parent The model under test.
---@field inputs? table<string, efmesh.Row[]> Parent name → fixture rows; every parent the model reads needs one (embedded parents may be left out: inlined).
---@field expect efmesh.Row[] The rows the model must return.
---@field vars? efmesh.TestVars Required for time-range models.
---@field ordered? boolean Compare rows in order (default: as a multiset).
---@field columns? string[] Compare only these output columns (default: every declared column).
---@field description? string Free text.

---Defines a unit test: fixture rows in, expected rows out (in test files only).
---@param spec efmesh.TestSpec
function define_test(spec) end

---An audit attached to a model, as `audit.<name>(…)` returns it.
---@class efmesh.AuditUse

---Arguments of an audit use: positional values (in the definition's parameter order), named
---parameters, and the options every use takes.
---@class efmesh.AuditArgs
---@field blocking? boolean `false` makes it a warn audit: logged and reported, never blocking (default `true`).
---@field scope? "interval"|"whole" The batch just written, or the whole relation (default: the definition's, usually `interval`).
---@field [string] any A parameter of the audit.

---The audits, by name: `audit.not_null("id")`, `audit.unique("a", "b")`,
---`audit.accepted_range { column = "x", min = 0, blocking = false }`; also `audit("name", …)`.
---Unknown names and bad arguments are load errors.
---@class efmesh.Audits
---@field not_null fun(...: string|efmesh.AuditArgs): efmesh.AuditUse Rows where any of the columns is NULL.
---@field unique fun(...: string|efmesh.AuditArgs): efmesh.AuditUse One row per duplicated key (the columns), with `duplicates`.
---@field accepted_values fun(args: efmesh.AuditArgs|string, values?: any[]): efmesh.AuditUse Non-NULL values not in `values`.
---@field accepted_range fun(args: efmesh.AuditArgs): efmesh.AuditUse Non-NULL values outside `[min, max]` (`inclusive = false`: open bounds).
---@field expression fun(condition: string|efmesh.AuditArgs): efmesh.AuditUse Rows for which the SQL condition is false.
---@field row_count fun(args: efmesh.AuditArgs): efmesh.AuditUse One row when the count is below `min` or above `max`.
---@field contiguous fun(column: string|efmesh.AuditArgs): efmesh.AuditUse Gaps in distinct integer values (scope `whole`).
---@field no_gaps fun(column: string|efmesh.AuditArgs): efmesh.AuditUse Gaps between day (or hour, `grain = "hour"`) buckets (scope `whole`).
---@field [string] fun(...: any): efmesh.AuditUse A project audit defined with `define_audit`.
---@overload fun(name: string, ...: any): efmesh.AuditUse
audit = {}

---@class efmesh.AuditSpec
---@field name string The name uses attach it by (`audit.<name>`), an identifier; unique across the project and the built-ins.
---@field params? string[] Required parameters, in positional order; the last may be `"name..."` (takes the remaining arguments, always a list).
---@field optional? string[] Optional parameters (after the required ones); `nil` in the body when absent.
---@field blocking? boolean Default of its uses (`true`).
---@field scope? "interval"|"whole" Default of its uses (`"interval"`).
---@field description? string Free text.
---@field query fun(self: string, args: table<string, any>): string Returns the SQL selecting the VIOLATING rows of `self` (the relation under audit).

---Defines an audit. Define it in `audits/` (evaluated before the models) or in a file the
---models `require`.
---@param spec efmesh.AuditSpec
function define_audit(spec) end

--- Defines a macro (only in macro files, `[project] macros`): `@name(arg, …)` in any model's
--- query is replaced by what `fn` returns; each argument arrives as the string written.
---@param name string
---@param fn fun(...: string): string
function define_macro(name, fn) end

--- Defines a signal (only in macro files): which of a model's candidate intervals are ready.
--- `fn` gets the intervals (`{ start = iso, ["end"] = iso }`, in order), the use's named
--- arguments and `db` (`db.query(sql)`: one read-only query, rows of text values); it returns one
--- boolean for all, or one per interval.
---@param name string
---@param fn fun(intervals: table[], args: table<string, any>, db: { query: fun(sql: string): string[][] }): boolean|boolean[]
function define_signal(name, fn) end
