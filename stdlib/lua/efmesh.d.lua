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
---@field kind "full"|"view"|"embedded"|"incremental_by_time_range"|"external"|"seed"

---@class efmesh.TimeRangeOptions
---@field time_column string Output column holding each row's instant (declared in `schema`).
---@field start string First instant, UTC: `YYYY-MM-DD`, `YYYY-MM-DD HH:MM:SS` or RFC 3339.
---@field end? string Exclusive end of history; no interval starts at or after it.
---@field grain? "day"|"hour" Interval width (default `day`).
---@field batch_size? integer Intervals per engine transaction (default 30).
---@field lookback? integer Intervals recomputed before every missing one (default 0).

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
