-- Raw sources: the nycflights13 files under data/, read in place by the engine.
-- Other files reach these handles with `require("models.raw")`.

local M = {}

M.flights = define_model {
  name        = "raw.flights",
  kind        = kind.external { path = "data/flights.parquet" },
  description = "Every flight that departed EWR, JFK or LGA in 2013 (nycflights13, converted from CSV "
             .. "to zstd Parquet with NA -> NULL). Times are local hhmm integers, delays in minutes; "
             .. "time_hour is the scheduled hour as a UTC instant.",
  schema = {
    { "year", "integer" }, { "month", "integer" }, { "day", "integer" },
    { "dep_time", "integer" }, { "sched_dep_time", "integer" }, { "dep_delay", "integer" },
    { "arr_time", "integer" }, { "sched_arr_time", "integer" }, { "arr_delay", "integer" },
    { "carrier", "varchar" }, { "flight", "integer" }, { "tailnum", "varchar" },
    { "origin", "varchar" }, { "dest", "varchar" },
    { "air_time", "integer" }, { "distance", "integer" },
    { "hour", "integer" }, { "minute", "integer" },
    { "time_hour", "timestamptz" },
  },
}

M.weather = define_model {
  name        = "raw.weather",
  kind        = kind.external { path = "data/weather.csv", null_markers = { "NA" } },
  description = "Hourly weather at the three NYC origin airports (one row per origin and UTC hour; "
             .. "ends 2013-12-30 23:00 UTC, so the last day of flights finds no weather).",
  schema = {
    { "origin", "varchar" },
    { "year", "integer" }, { "month", "integer" }, { "day", "integer" }, { "hour", "integer" },
    { "temp", "double" }, { "dewp", "double" }, { "humid", "double" },
    { "wind_dir", "integer" }, { "wind_speed", "double" }, { "wind_gust", "double" },
    { "precip", "double" }, { "pressure", "double" }, { "visib", "double" },
    { "time_hour", "timestamptz" },
  },
  -- Sources can carry audits too: checked when an environment starts serving this version,
  -- and whenever an apply or run reads the source into a table.
  audits = { audit.not_null("origin", "time_hour") },
}

M.planes = define_model {
  name        = "raw.planes",
  kind        = kind.external { path = "data/planes.csv", null_markers = { "NA" } },
  description = "Aircraft registry by tail number. Many flights reference tail numbers missing here "
             .. "(mostly AA and MQ, which report fleet numbers).",
  schema = {
    { "tailnum", "varchar" }, { "year", "integer" }, { "type", "varchar" },
    { "manufacturer", "varchar" }, { "model", "varchar" },
    { "engines", "integer" }, { "seats", "integer" }, { "speed", "integer" },
    { "engine", "varchar" },
  },
}

M.airlines = define_model {
  name        = "raw.airlines",
  kind        = kind.external { path = "data/airlines.csv" },
  description = "Carrier code to airline name (16 rows).",
  schema      = { { "carrier", "varchar" }, { "name", "varchar" } },
}

M.airports = define_model {
  name        = "raw.airports",
  kind        = kind.external { path = "data/airports.csv", null_markers = { "NA" } },
  description = "US airports by FAA code with position, altitude (ft) and time zone. Four destinations "
             .. "(BQN, PSE, SJU, STT in Puerto Rico and the Virgin Islands) are missing.",
  schema = {
    { "faa", "varchar" }, { "name", "varchar" },
    { "lat", "double" }, { "lon", "double" }, { "alt", "integer" },
    { "tz", "integer" }, { "dst", "varchar" }, { "tzone", "varchar" },
  },
}

return M
