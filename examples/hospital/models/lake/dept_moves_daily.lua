-- lake.dept_moves_daily: movements per UTC day, department and event, kept as parquet files in
-- the lake (`[lake] path` in efmesh.toml): one file per day under
-- lake/lake__dept_moves_daily/<fingerprint>/, with a manifest.json for readers without efmesh.
local moves = require("models.med.moves")

return define_model {
  name        = "lake.dept_moves_daily",
  kind        = kind.incremental_by_time_range {
    time_column = "day", start = "2026-01-01", ["end"] = "2026-07-01", grain = "day", batch_size = 31,
  },
  target      = "parquet",
  description = "Movements per UTC day, department and event (parquet lake, one file per day).",
  grain       = { "day", "dept", "event" },
  schema = {
    { "day", "timestamp" }, { "dept", "varchar" }, { "event", "varchar" }, { "moves", "bigint" },
  },
  query = function()
    return ([[
SELECT CAST(date_trunc('day', moved_at) AS TIMESTAMP) AS day, dept, event, count(*) AS moves
FROM   %s
WHERE  moved_at >= @start AND moved_at < @end
GROUP  BY ALL
]]):format(ref(moves))
  end,
}
