-- core.airlines_named: a tiny lookup that is never materialised; efmesh inlines it as a
-- subquery wherever it is referenced (ref("core.airlines_named")). Join it with
-- `USING (carrier)` and read `airline` unqualified, so the inlined subquery needs no alias.
local raw = require("models.raw")

return define_model {
  name        = "core.airlines_named",
  kind        = kind.embedded(),
  description = "Carrier code -> short airline name (corporate suffixes such as 'Inc.' dropped).",
  grain       = { "carrier" },
  schema      = { { "carrier", "varchar" }, { "airline", "varchar" } },
  query       = ([[
SELECT carrier,
       regexp_replace(name, '\s+(Inc\.|Co\.|Corporation)$', '') AS airline
FROM   %s
]]):format(ref(raw.airlines)),
}
