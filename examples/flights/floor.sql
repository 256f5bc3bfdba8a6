-- The floor of examples/flights (issue #13): the same transformations as models/, written by
-- hand as one DuckDB script with no efmesh — what a careful user would run directly.
-- Whole year per statement (no per-interval batches), no audits, no state, no views but the one
-- view model. Run from this directory on a fresh DuckDB file, e.g.
--   duckdb floor.duckdb < floor.sql
-- `scripts/cargo run --example bench -- --floor` times it against `efmesh apply dev --yes` and
-- checks that every table equals what efmesh's `dev` serves.
SET TimeZone = 'UTC';
CREATE SCHEMA core;
CREATE SCHEMA mart;

-- core.flights: typed, keyed flights of 2013 (UTC days 2013-01-01 .. 2014-01-02).
CREATE TABLE core.flights AS
SELECT make_date(year, month, day)    AS flight_date,
       carrier, flight, tailnum, origin, dest,
       sched_dep_time, dep_time, dep_delay,
       sched_arr_time, arr_time, arr_delay,
       air_time, distance,
       dep_time IS NULL               AS cancelled,
       time_hour + to_minutes(minute) AS sched_dep_at,
       time_hour
FROM   read_parquet('data/flights.parquet')
WHERE  time_hour >= TIMESTAMPTZ '2013-01-01 00:00:00+00' AND time_hour < TIMESTAMPTZ '2014-01-02 00:00:00+00';

-- mart.carrier_delays_daily: punctuality per carrier and UTC day.
CREATE TABLE mart.carrier_delays_daily AS
SELECT CAST(timezone('UTC', f.time_hour) AS date) AS utc_day,
       carrier,
       regexp_replace(a.name, '\s+(Inc\.|Co\.|Corporation)$', '') AS airline,
       count(*)                                   AS flights,
       count(*) FILTER (WHERE f.cancelled)        AS cancelled,
       round(avg(f.dep_delay), 2)                 AS avg_dep_delay,
       median(f.dep_delay)                        AS median_dep_delay,
       round(avg(f.arr_delay), 2)                 AS avg_arr_delay,
       median(f.arr_delay)                        AS median_arr_delay
FROM   core.flights AS f
LEFT JOIN read_csv('data/airlines.csv', types = {'carrier': 'varchar', 'name': 'varchar'}) AS a USING (carrier)
GROUP BY ALL;

-- mart.flights_enriched: each flight with its origin's weather and its aircraft.
CREATE TABLE mart.flights_enriched AS
SELECT f.flight_date, f.carrier, f.flight, f.tailnum, f.origin, f.dest,
       f.time_hour, f.sched_dep_at, f.dep_delay, f.arr_delay, f.cancelled, f.distance,
       w.temp, w.wind_speed, w.wind_gust, w.precip, w.visib,
       p.manufacturer, p.model, p.year AS plane_year, p.seats, p.engines,
       w.origin IS NOT NULL  AS has_weather,
       p.tailnum IS NOT NULL AS has_plane
FROM   core.flights AS f
LEFT JOIN read_csv('data/weather.csv', nullstr = ['NA'], types = {
            'origin': 'varchar', 'year': 'integer', 'month': 'integer', 'day': 'integer', 'hour': 'integer',
            'temp': 'double', 'dewp': 'double', 'humid': 'double', 'wind_dir': 'integer',
            'wind_speed': 'double', 'wind_gust': 'double', 'precip': 'double', 'pressure': 'double',
            'visib': 'double', 'time_hour': 'timestamptz'}) AS w
       ON w.origin = f.origin AND w.time_hour = f.time_hour
LEFT JOIN read_csv('data/planes.csv', nullstr = ['NA'], types = {
            'tailnum': 'varchar', 'year': 'integer', 'type': 'varchar', 'manufacturer': 'varchar',
            'model': 'varchar', 'engines': 'integer', 'seats': 'integer', 'speed': 'integer',
            'engine': 'varchar'}) AS p
       ON p.tailnum = f.tailnum;

-- mart.routes: one row per origin, destination and carrier over the year.
CREATE TABLE mart.routes AS
SELECT f.origin,
       f.dest,
       ap.name                                AS dest_name,
       carrier,
       regexp_replace(a.name, '\s+(Inc\.|Co\.|Corporation)$', '') AS airline,
       count(*)                               AS flights,
       count(*) FILTER (WHERE f.cancelled)    AS cancelled,
       max(f.distance)                        AS distance,
       round(avg(f.air_time), 1)              AS avg_air_time,
       round(avg(f.arr_delay), 2)             AS avg_arr_delay
FROM   core.flights AS f
LEFT JOIN read_csv('data/airports.csv', nullstr = ['NA'], types = {
            'faa': 'varchar', 'name': 'varchar', 'lat': 'double', 'lon': 'double', 'alt': 'integer',
            'tz': 'integer', 'dst': 'varchar', 'tzone': 'varchar'}) AS ap
       ON ap.faa = f.dest
LEFT JOIN read_csv('data/airlines.csv', types = {'carrier': 'varchar', 'name': 'varchar'}) AS a USING (carrier)
GROUP BY ALL;

-- mart.worst_routes: the 20 worst routes flown at least 365 times.
CREATE VIEW mart.worst_routes AS
SELECT origin, dest, dest_name, carrier, airline, flights, avg_arr_delay
FROM   mart.routes
WHERE  flights >= 365
ORDER BY avg_arr_delay DESC, origin, dest, carrier
LIMIT  20;
