-- med.moves: the cleaned movements, materialised one UTC day at a time on moved_at.
-- lookback = 2: whenever a day is (re)computed, the two days before it are recomputed too, so
-- rows that reach the feed up to two days late are picked up by the next run. (Rows later than
-- that are only picked up when their days are restated.)
local stg = require("models.stg.moves")

return define_model {
  name        = "med.moves",
  kind        = kind.incremental_by_time_range {
    time_column = "moved_at", start = "2026-01-01", ["end"] = "2026-07-01",
    grain = "day", batch_size = 7, lookback = 2,
  },
  description = "Admissions, transfers and discharges by the day they happened (UTC).",
  grain       = { "move_id" },
  schema = {
    { "move_id", "bigint" }, { "case_id", "varchar" }, { "patient_id", "varchar" },
    { "dept", "varchar" }, { "dept_name", "varchar" }, { "event", "varchar" },
    { "moved_at", "timestamptz" }, { "recorded_at", "timestamptz" }, { "is_late", "boolean" },
  },
  query = function()
    return ([[
SELECT %s
FROM   %s
WHERE  moved_at >= @start AND moved_at < @end
]]):format(
      cols(stg, "move_id", "case_id", "patient_id", "dept", "dept_name", "event",
                "moved_at", "recorded_at", "is_late"),
      ref(stg))
  end,
}
