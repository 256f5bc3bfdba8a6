-- efmesh Lua prelude: the kind constructors every model file sees as `kind`.
--
-- Each constructor returns a plain table tagged with `kind`; the host validates the fields
-- strictly (an unknown or misspelled field is a load error naming it). This file ships inside
-- the binary; each model file gets its own copy of the `kind` table, so no file can change what
-- another one sees. A kind the table lacks (`kind.ful()`) is an error naming it with the
-- closest kind (`unknown`: the host's message, the one a `.sql` model's `-- kind: ful` gets),
-- instead of Lua's "attempt to call a nil value"; `guard` gives each file's copy that behaviour.

local unknown = ...
local kind = {}

local function tagged(tag, opts)
  local t = { kind = tag }
  if opts ~= nil then
    if type(opts) ~= "table" then
      error(("kind.%s expects a table of options, got %s"):format(tag, type(opts)), 3)
    end
    for k, v in pairs(opts) do
      t[k] = v
    end
  end
  return t
end

--- Rebuilt as a whole table whenever the model's version changes.
function kind.full(opts) return tagged("full", opts) end

--- A view in the physical schema.
function kind.view(opts) return tagged("view", opts) end

--- Never materialised; inlined as a subquery wherever it is referenced.
function kind.embedded(opts) return tagged("embedded", opts) end

--- Built interval by interval: { time_column, start, grain = "day"|"hour", batch_size = 30,
--- lookback = 0, auto_restatement_intervals = 0, ["end"] = nil }.
function kind.incremental_by_time_range(opts) return tagged("incremental_by_time_range", opts) end

--- Raw data entering the DAG: { table = "schema.table" } or { path = "data/x.parquet",
--- format = "csv"|"parquet"|"json", null_markers = {"NA"}, union_by_name = bool,
--- hive_partitioning = bool, delimiter = ";", header = bool }.
function kind.external(opts) return tagged("external", opts) end

--- Upserted by key on every build and every `efmesh run`: { key = "id" | { "a", "b" } }.
function kind.incremental_by_unique_key(opts) return tagged("incremental_by_unique_key", opts) end

--- Partitions present in the query's output replace the stored ones on every build and every
--- `efmesh run`; other partitions stay: { partitioned_by = "col" | { "a", "b" } }.
function kind.incremental_by_partition(opts) return tagged("incremental_by_partition", opts) end

--- History by key (slowly changing dimension, type 2): { key = "id" | { "a", "b" },
--- valid_from = "valid_from", valid_to = "valid_to", columns = { watched… } | nil,
--- invalidate_hard_deletes = true, renamed = { old = "new" } } (`renamed` carries the history
--- over a column rename).
function kind.scd_type2(opts) return tagged("scd_type2", opts) end

--- A CSV or JSON file of the project loaded into a table; its content hash is fingerprinted:
--- { path = "seeds/x.csv", format = "csv"|"json", null_markers = {"NA"}, delimiter = ";" }.
function kind.seed(opts) return tagged("seed", opts) end

-- One metatable for every copy, protected (`getmetatable(kind)` is `false`, so no file can
-- change it for the others).
local guarded = {
  __index = function(_, name)
    error(unknown(type(name) == "string" and name or ("a " .. type(name))), 2)
  end,
  __metatable = false,
}

--- `t` (a file's copy of `kind`) raising an error for a kind it lacks.
local function guard(t) return setmetatable(t, guarded) end

return { kind = kind, guard = guard }
