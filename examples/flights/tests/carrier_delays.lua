-- Unit test of mart.carrier_delays_daily (Lua), a daily time-range model.
-- Its embedded parent core.airlines_named has no fixture here, so it is inlined over the
-- fixture of its own parent, raw.airlines: the test covers the name clean-up too.
-- Run with `efmesh test --config examples/flights/efmesh.toml`.

define_test {
  name  = "carrier_delays_of_one_utc_day",
  model = "mart.carrier_delays_daily",
  vars  = { start = "2013-01-01", ["end"] = "2013-01-02" },
  inputs = {
    ["core.flights"] = {
      { carrier = "UA", flight = 1, time_hour = "2013-01-01 10:00:00+00", dep_delay = 10, arr_delay = -5, cancelled = false },
      { carrier = "UA", flight = 2, time_hour = "2013-01-01 15:00:00+00", dep_delay = 20, arr_delay = 25, cancelled = false },
      -- cancelled: no delays (NULL), counted as a flight and as cancelled
      { carrier = "UA", flight = 3, time_hour = "2013-01-01 23:00:00+00", cancelled = true },
      -- carrier missing from raw.airlines: airline is NULL
      { carrier = "ZZ", flight = 9, time_hour = "2013-01-01 06:00:00+00", dep_delay = 0, arr_delay = 0, cancelled = false },
      -- the next UTC day: outside the interval
      { carrier = "UA", flight = 4, time_hour = "2013-01-02 00:00:00+00", dep_delay = 99, arr_delay = 99, cancelled = false },
    },
    ["raw.airlines"] = {
      { carrier = "UA", name = "United Air Lines Inc." },
    },
  },
  expect = {
    { utc_day = "2013-01-01", carrier = "UA", airline = "United Air Lines", flights = 3, cancelled = 1,
      avg_dep_delay = 15, median_dep_delay = 15, avg_arr_delay = 10, median_arr_delay = 10 },
    { utc_day = "2013-01-01", carrier = "ZZ", flights = 1, cancelled = 0,
      avg_dep_delay = 0, median_dep_delay = 0, avg_arr_delay = 0, median_arr_delay = 0 },
  },
}
