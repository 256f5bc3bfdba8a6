-- Marts: a daily time-range model and a full rollup over it.
local raw = require("raw") -- models/raw.lua, which returns its model handles

local daily = define_model {
  name = "mart.daily_revenue",
  kind = kind.incremental_by_time_range {
    time_column = "day", start = "2026-01-01", grain = "day", lookback = 1,
  },
  schema = { { "day", "timestamp" }, { "region", "varchar" }, { "revenue", "bigint" } },
  grain = { "day", "region" },
  description = "Revenue per region and day",
  query = function()
    return ([[
      SELECT date_trunc('day', event_at)::TIMESTAMP AS day, region,
             CAST(sum(amount) AS BIGINT) AS revenue
      FROM %s
      WHERE event_at >= @start AND event_at < @end
      GROUP BY ALL
    ]]):format(ref(raw.stg_events))
  end,
}

define_model {
  name = "mart.region_revenue",
  kind = kind.full(),
  schema = { { "region", "varchar" }, { "revenue", "bigint" }, { "days", "bigint" } },
  description = "Total revenue per region",
  query = ([[
    SELECT region, CAST(sum(revenue) AS BIGINT) AS revenue, count(*) AS days
    FROM %s
    GROUP BY region
    ORDER BY revenue DESC
  ]]):format(ref(daily)),
}
