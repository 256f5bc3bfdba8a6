-- name:   med.census_daily
-- kind:   full
-- schema: day date, dept varchar, dept_name varchar, present_end_of_day bigint,
--         admitted bigint, transferred_in bigint, transferred_out bigint, discharged bigint,
--         beds integer, occupancy_pct double precision
-- grain:  day, dept
-- refs:   med.stays, med.moves, raw.departments
-- description: One row per UTC day and department (every department, every day between the
--   first and the last movement): patients present at the end of the day, admissions,
--   transfers in and out, discharges, beds and occupancy in percent of beds.
--
-- Portable SQL, against examples/hospital's DuckDB SQL: the days come from generate_series as a
-- table function over timestamps (DuckDB's `unnest(generate_series(date, date, INTERVAL 1 DAY))`
-- is a list function), intervals are written `INTERVAL '1 day'`, GROUP BY names its columns
-- (no GROUP BY ALL), and the occupancy is rounded as an exact numeric then cast to a double
-- (Postgres's round(…, 1) takes a numeric; DuckDB's division already gives a double).
WITH stays AS (
    SELECT dept, entered_at, left_at, left_by FROM @ref(med.stays)
),
bounds AS (
    SELECT min(CAST(timezone('UTC', moved_at) AS date)) AS lo,
           max(CAST(timezone('UTC', moved_at) AS date)) AS hi
    FROM   @ref(med.moves)
),
days AS (
    SELECT CAST(g.day AS date) AS day
    FROM   bounds,
           generate_series(CAST(bounds.lo AS timestamp), CAST(bounds.hi AS timestamp), INTERVAL '1 day') AS g(day)
),
flows AS (            -- +1 on the day a stay starts, -1 on the day it ends
    SELECT dept, CAST(timezone('UTC', entered_at) AS date) AS day, 1 AS delta FROM stays
    UNION ALL
    SELECT dept, CAST(timezone('UTC', left_at) AS date), -1 FROM stays WHERE left_at IS NOT NULL
),
net AS (
    SELECT dept, day, sum(delta) AS delta FROM flows GROUP BY dept, day
),
events AS (
    SELECT dept, CAST(timezone('UTC', moved_at) AS date) AS day,
           count(*) FILTER (WHERE event = 'admission') AS admitted,
           count(*) FILTER (WHERE event = 'transfer')  AS transferred_in,
           count(*) FILTER (WHERE event = 'discharge') AS discharged
    FROM   @ref(med.moves)
    GROUP BY dept, CAST(timezone('UTC', moved_at) AS date)
),
transfers_out AS (
    SELECT dept, CAST(timezone('UTC', left_at) AS date) AS day, count(*) AS transferred_out
    FROM   stays WHERE left_by = 'transfer'
    GROUP BY dept, CAST(timezone('UTC', left_at) AS date)
),
grid AS (
    SELECT days.day, d.code AS dept, d.name AS dept_name, d.beds,
           CAST(sum(coalesce(net.delta, 0)) OVER (PARTITION BY d.code ORDER BY days.day) AS bigint)
                                                    AS present_end_of_day,
           coalesce(e.admitted, 0)                  AS admitted,
           coalesce(e.transferred_in, 0)            AS transferred_in,
           coalesce(t.transferred_out, 0)           AS transferred_out,
           coalesce(e.discharged, 0)                AS discharged
    FROM   days
    CROSS JOIN @ref(raw.departments) AS d
    LEFT JOIN net             ON net.dept = d.code AND net.day = days.day
    LEFT JOIN events AS e     ON e.dept   = d.code AND e.day   = days.day
    LEFT JOIN transfers_out t ON t.dept   = d.code AND t.day   = days.day
)
SELECT day, dept, dept_name, present_end_of_day,
       admitted, transferred_in, transferred_out, discharged,
       beds,
       CAST(round(100.0 * present_end_of_day / beds, 1) AS DOUBLE PRECISION) AS occupancy_pct
FROM   grid
