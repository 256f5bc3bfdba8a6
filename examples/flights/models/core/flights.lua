-- core.flights: the flights, typed and keyed, built one UTC day at a time.
local raw = require("models.raw")

local M = {}

M.flights = define_model {
  name        = "core.flights",
  -- Intervals are UTC days. The last evening of 2013 in New York is already 2014-01-01 in UTC
  -- (88 flights, time_hour up to 2014-01-01 04:00 UTC), hence `end` = 2014-01-02.
  kind        = kind.incremental_by_time_range {
    time_column = "time_hour", start = "2013-01-01", ["end"] = "2014-01-02",
    grain = "day", batch_size = 30, lookback = 0,
  },
  description = "One row per scheduled flight. Adds flight_date (local calendar date as published), "
             .. "the scheduled departure as a UTC instant and a cancelled flag (no departure time).",
  grain       = { "carrier", "flight", "time_hour" },
  schema = {
    { "flight_date", "date" },
    { "carrier", "varchar" }, { "flight", "integer" }, { "tailnum", "varchar" },
    { "origin", "varchar" }, { "dest", "varchar" },
    { "sched_dep_time", "integer" }, { "dep_time", "integer" }, { "dep_delay", "integer" },
    { "sched_arr_time", "integer" }, { "arr_time", "integer" }, { "arr_delay", "integer" },
    { "air_time", "integer" }, { "distance", "integer" },
    { "cancelled", "boolean" },
    { "sched_dep_at", "timestamptz" },
    { "time_hour", "timestamptz" },
  },
  -- Checked while each batch is written (a blocking violation rolls the batch back), except
  -- the `whole`-scoped no_gaps, which sees the whole table. Early departures are real: the
  -- warn audit reports them (183,575 flights left before their scheduled time) and never blocks.
  audits = {
    audit.not_null("carrier", "flight", "origin", "dest", "time_hour"),
    audit.accepted_values { column = "origin", values = { "EWR", "JFK", "LGA" } },
    audit.no_gaps { column = "time_hour", grain = "day" },
    audit.accepted_range { column = "dep_delay", min = 0, blocking = false },
  },
  query = function()
    return ([[
SELECT make_date(year, month, day)                     AS flight_date,
       %s,
       dep_time IS NULL                                AS cancelled,
       time_hour + to_minutes(minute)                  AS sched_dep_at,
       time_hour
FROM   %s
WHERE  time_hour >= @start AND time_hour < @end
]]):format(
      cols(raw.flights, "carrier", "flight", "tailnum", "origin", "dest",
                        "sched_dep_time", "dep_time", "dep_delay",
                        "sched_arr_time", "arr_time", "arr_delay",
                        "air_time", "distance"),
      ref(raw.flights))
  end,
}

return M
