-- Raw data enters the DAG as external sources: read in place, never built.
local M = {}

M.events = define_model {
  name = "raw.events",
  kind = kind.external { path = "data/events.csv" },
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
  description = "Sales events, one row per sale (CSV read in place)",
}

-- Staged as a table, so each daily batch of mart.daily_revenue reads only its rows (a CSV is
-- re-read whole by every query: `efmesh check` warns of that, rule `batch_rescan`). efmesh does
-- not watch the CSV: the cron makes `efmesh run` re-read it once a day (at 00:00 UTC).
M.stg_events = define_model {
  name = "stg.events",
  kind = kind.full(),
  cron = "@daily",
  schema = { { "event_at", "timestamp" }, { "region", "varchar" }, { "amount", "bigint" } },
  description = "Sales events as a table",
  query = "SELECT event_at, region, amount FROM " .. ref(M.events),
}

return M
