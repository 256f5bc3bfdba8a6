-- mart.flights_enriched: each flight with the weather at its origin in its scheduled hour and
-- the aircraft's registry data. Both joins are LEFT: a missing key is real (no weather after
-- 2013-12-30 23:00 UTC, 721 tail numbers absent from planes, 2,512 flights without a tail
-- number), and the row count of core.flights is preserved.
local core = require("models.core.flights")
local raw  = require("models.raw")

return define_model {
  name        = "mart.flights_enriched",
  kind        = kind.full(),
  description = "core.flights LEFT JOIN raw.weather (origin, time_hour) LEFT JOIN raw.planes (tailnum); "
             .. "one row per flight. has_weather / has_plane tell whether each join found its row.",
  grain       = { "carrier", "flight", "time_hour" },
  schema = {
    { "flight_date", "date" }, { "carrier", "varchar" }, { "flight", "integer" },
    { "tailnum", "varchar" }, { "origin", "varchar" }, { "dest", "varchar" },
    { "time_hour", "timestamptz" }, { "sched_dep_at", "timestamptz" },
    { "dep_delay", "integer" }, { "arr_delay", "integer" }, { "cancelled", "boolean" },
    { "distance", "integer" },
    { "temp", "double" }, { "wind_speed", "double" }, { "wind_gust", "double" },
    { "precip", "double" }, { "visib", "double" },
    { "manufacturer", "varchar" }, { "model", "varchar" }, { "plane_year", "integer" },
    { "seats", "integer" }, { "engines", "integer" },
    { "has_weather", "boolean" }, { "has_plane", "boolean" },
  },
  audits = {
    audit.unique("carrier", "flight", "time_hour"),
    -- Unknown tail numbers (50,094 flights whose tailnum is not in raw.planes): a warning.
    audit.expression { "has_plane OR tailnum IS NULL", blocking = false },
  },
  query = ([[
SELECT f.flight_date, f.carrier, f.flight, f.tailnum, f.origin, f.dest,
       f.time_hour, f.sched_dep_at, f.dep_delay, f.arr_delay, f.cancelled, f.distance,
       w.temp, w.wind_speed, w.wind_gust, w.precip, w.visib,
       p.manufacturer, p.model, p.year AS plane_year, p.seats, p.engines,
       w.origin IS NOT NULL  AS has_weather,
       p.tailnum IS NOT NULL AS has_plane
FROM   %s AS f
LEFT JOIN %s AS w ON w.origin = f.origin AND w.time_hour = f.time_hour
LEFT JOIN %s AS p ON p.tailnum = f.tailnum
]]):format(ref(core.flights), ref(raw.weather), ref(raw.planes)),
}
