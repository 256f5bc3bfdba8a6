-- Raw data enters the DAG as external sources: read in place, never built.
local M = {}

M.events = define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
  description = "Sales events, one row per sale (CSV read in place)",
}

return M
