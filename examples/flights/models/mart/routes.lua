-- mart.routes (table) and mart.worst_routes (view on top of it).
local core = require("models.core.flights")
local raw  = require("models.raw")

local M = {}

M.routes = define_model {
  name        = "mart.routes",
  kind        = kind.full(),
  description = "One row per origin, destination and carrier over the whole year: flights, "
             .. "cancellations, distance (miles), mean air time and mean arrival delay (minutes). "
             .. "dest_name is NULL for the four destinations missing from raw.airports.",
  grain       = { "origin", "dest", "carrier" },
  schema = {
    { "origin", "varchar" }, { "dest", "varchar" }, { "dest_name", "varchar" },
    { "carrier", "varchar" }, { "airline", "varchar" },
    { "flights", "bigint" }, { "cancelled", "bigint" },
    { "distance", "integer" }, { "avg_air_time", "double" }, { "avg_arr_delay", "double" },
  },
  query = ([[
SELECT f.origin,
       f.dest,
       ap.name                                 AS dest_name,
       carrier,
       airline,
       count(*)                                AS flights,
       count(*) FILTER (WHERE f.cancelled)     AS cancelled,
       max(f.distance)                         AS distance,
       round(avg(f.air_time), 1)               AS avg_air_time,
       round(avg(f.arr_delay), 2)              AS avg_arr_delay
FROM   %s AS f
LEFT JOIN %s AS ap ON ap.faa = f.dest
LEFT JOIN %s USING (carrier)
GROUP BY ALL
]]):format(ref(core.flights), ref(raw.airports), ref("core.airlines_named")),
}

M.worst_routes = define_model {
  name        = "mart.worst_routes",
  kind        = kind.view(),
  description = "The 20 routes (origin, destination, carrier) flown at least 365 times in the year "
             .. "with the highest mean arrival delay.",
  grain       = { "origin", "dest", "carrier" },
  schema = {
    { "origin", "varchar" }, { "dest", "varchar" }, { "dest_name", "varchar" },
    { "carrier", "varchar" }, { "airline", "varchar" },
    { "flights", "bigint" }, { "avg_arr_delay", "double" },
  },
  query = ([[
SELECT %s
FROM   %s
WHERE  flights >= 365
ORDER BY avg_arr_delay DESC, origin, dest, carrier
LIMIT  20
]]):format(
    cols("mart.routes", "origin", "dest", "dest_name", "carrier", "airline", "flights", "avg_arr_delay"),
    ref("mart.routes")),
}

return M
