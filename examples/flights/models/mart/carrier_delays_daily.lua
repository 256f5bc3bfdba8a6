-- mart.carrier_delays_daily: punctuality per carrier and UTC day, built interval by interval.
local core = require("models.core.flights")

return define_model {
  name        = "mart.carrier_delays_daily",
  kind        = kind.incremental_by_time_range {
    time_column = "utc_day", start = "2013-01-01", ["end"] = "2014-01-02",
    grain = "day", batch_size = 30,
  },
  description = "Delays by carrier and UTC day (the day of the scheduled hour in UTC, which is how "
             .. "efmesh cuts intervals): flights, cancelled flights (no departure time), mean and "
             .. "median departure and arrival delay in minutes (cancelled flights have no delay).",
  grain       = { "utc_day", "carrier" },
  schema = {
    { "utc_day", "date" }, { "carrier", "varchar" }, { "airline", "varchar" },
    { "flights", "bigint" }, { "cancelled", "bigint" },
    { "avg_dep_delay", "double" }, { "median_dep_delay", "double" },
    { "avg_arr_delay", "double" }, { "median_arr_delay", "double" },
  },
  query = function()
    return ([[
SELECT CAST(timezone('UTC', f.time_hour) AS date)  AS utc_day,
       carrier,
       airline,
       count(*)                                    AS flights,
       count(*) FILTER (WHERE f.cancelled)         AS cancelled,
       round(avg(f.dep_delay), 2)                  AS avg_dep_delay,
       median(f.dep_delay)                         AS median_dep_delay,
       round(avg(f.arr_delay), 2)                  AS avg_arr_delay,
       median(f.arr_delay)                         AS median_arr_delay
FROM   %s AS f
LEFT JOIN %s USING (carrier)
WHERE  f.time_hour >= @start AND f.time_hour < @end
GROUP BY ALL
]]):format(ref(core.flights), ref("core.airlines_named"))
  end,
}
