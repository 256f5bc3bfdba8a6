-- name:   lake.dept_load
-- kind:   full
-- target: ducklake
-- schema: dept varchar, dept_name varchar, moves bigint, cases bigint
-- grain:  dept
-- refs:   med.moves
-- description: Movements and distinct cases per department over the whole period, stored as a
--   table of the DuckLake catalog configured in efmesh.toml (one table per version).
SELECT dept, dept_name, count(*) AS moves, count(DISTINCT case_id) AS cases
FROM @ref(med.moves)
GROUP BY ALL
