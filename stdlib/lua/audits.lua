-- efmesh built-in audits (Lua), evaluated before any project file.
--
-- Each is written with the public `define_audit` API a project uses: a body receives the relation
-- under audit (`self`, a placeholder efmesh substitutes) and the bound arguments, and returns a
-- query selecting the VIOLATING rows (no rows = the audit passes). `stdlib/rhai/audits.rhai`
-- defines the same audits and renders byte-identical SQL (a test holds them together).
-- NULL never violates `accepted_values` nor `accepted_range`: use `not_null` for that.

local function ident(name)
  return '"' .. (string.gsub(tostring(name), '"', '""')) .. '"'
end

local function literal(v)
  local t = type(v)
  if t == "string" then return "'" .. (string.gsub(v, "'", "''")) .. "'" end
  if t == "boolean" then return v and "TRUE" or "FALSE" end
  if t == "number" then return tostring(v) end
  error("values must be strings, numbers or booleans, got a " .. t, 0)
end

local function join(items, f, sep)
  local out = {}
  for i, v in ipairs(items) do out[i] = f(v) end
  return table.concat(out, sep)
end

local function text(name, v)
  if type(v) ~= "string" then error("`" .. name .. "` must be a string", 0) end
  return v
end

define_audit {
  name = "not_null",
  params = { "columns..." },
  description = "rows where any of the columns is NULL",
  query = function(self, args)
    return "SELECT * FROM " .. self .. " WHERE " .. join(args.columns, function(c) return ident(text("columns", c)) .. " IS NULL" end, " OR ")
  end,
}

define_audit {
  name = "unique",
  params = { "columns..." },
  description = "one row per duplicated key, with its count in `duplicates`",
  query = function(self, args)
    local key = join(args.columns, function(c) return ident(text("columns", c)) end, ", ")
    return "SELECT " .. key .. ", count(*) AS duplicates FROM " .. self .. " GROUP BY " .. key
      .. " HAVING count(*) > 1 ORDER BY duplicates DESC, " .. key
  end,
}

define_audit {
  name = "accepted_values",
  params = { "column", "values" },
  description = "rows whose value is not NULL and not in the list",
  query = function(self, args)
    if type(args.values) ~= "table" or #args.values == 0 then error("`values` must be a non-empty list", 0) end
    local c = ident(text("column", args.column))
    return "SELECT * FROM " .. self .. " WHERE " .. c .. " IS NOT NULL AND " .. c .. " NOT IN (" .. join(args.values, literal, ", ") .. ")"
  end,
}

define_audit {
  name = "accepted_range",
  params = { "column" },
  optional = { "min", "max", "inclusive" },
  description = "rows whose value is not NULL and outside [min, max] (or (min, max) with inclusive = false)",
  query = function(self, args)
    local c = ident(text("column", args.column))
    local strict = args.inclusive == false
    local out = {}
    if args.min ~= nil then out[#out + 1] = c .. (strict and " <= " or " < ") .. literal(args.min) end
    if args.max ~= nil then out[#out + 1] = c .. (strict and " >= " or " > ") .. literal(args.max) end
    if #out == 0 then error("`accepted_range` needs `min`, `max` or both", 0) end
    return "SELECT * FROM " .. self .. " WHERE " .. c .. " IS NOT NULL AND (" .. table.concat(out, " OR ") .. ")"
  end,
}

define_audit {
  name = "expression",
  params = { "condition" },
  description = "rows for which the boolean SQL condition is false (NULL does not violate)",
  query = function(self, args)
    return "SELECT * FROM " .. self .. " WHERE NOT (" .. text("condition", args.condition) .. ")"
  end,
}

define_audit {
  name = "row_count",
  optional = { "min", "max" },
  description = "one row holding the count when it is below `min` or above `max`",
  query = function(self, args)
    local out = {}
    if args.min ~= nil then out[#out + 1] = "row_count < " .. literal(args.min) end
    if args.max ~= nil then out[#out + 1] = "row_count > " .. literal(args.max) end
    if #out == 0 then error("`row_count` needs `min`, `max` or both", 0) end
    return "SELECT row_count FROM (SELECT count(*) AS row_count FROM " .. self .. ") AS counted WHERE " .. table.concat(out, " OR ")
  end,
}

define_audit {
  name = "contiguous",
  params = { "column" },
  scope = "whole",
  description = "one row per gap in the distinct integer values: `covered_through`, `resumes_at`, `missing`, first gap first",
  query = function(self, args)
    local c = ident(text("column", args.column))
    return "SELECT covered_through, resumes_at, resumes_at - covered_through - 1 AS missing FROM ("
      .. "SELECT lag(v) OVER (ORDER BY v) AS covered_through, v AS resumes_at FROM ("
      .. "SELECT DISTINCT " .. c .. " AS v FROM " .. self .. " WHERE " .. c .. " IS NOT NULL) AS d) AS steps"
      .. " WHERE covered_through IS NOT NULL AND resumes_at > covered_through + 1 ORDER BY covered_through"
  end,
}

define_audit {
  name = "no_gaps",
  params = { "column" },
  optional = { "grain" },
  scope = "whole",
  description = "one row per gap between the grain buckets (5m, 15m, hour, day, week, month; default day) of a time column: `covered_through`, `resumes_at`, `missing`, first gap first",
  query = function(self, args)
    local grain = args.grain or "day"
    local minutes = ({ ["5m"] = "5", five_minute = "5", ["15m"] = "15", quarter_hour = "15" })[grain]
    local seconds = ({ ["5m"] = "300", five_minute = "300", ["15m"] = "900", quarter_hour = "900", hour = "3600", day = "86400", week = "604800" })[grain]
    if seconds == nil and grain ~= "month" then
      error("`grain` must be \"5m\", \"15m\", \"hour\", \"day\", \"week\" or \"month\"", 0)
    end
    local c = ident(text("column", args.column))
    -- Portable SQL (DuckDB and Postgres): buckets as naive UTC timestamps (weeks start on
    -- Monday), gaps counted from the interval between them (months from the calendar). The
    -- bucket is computed over the column's distinct values, not every row: a time zone-aware
    -- date_trunc costs far more per row than a DISTINCT (flights: 79 ms → 7 ms).
    local bucket = "date_trunc('" .. grain .. "', " .. c .. ")"
    local step = "1 " .. grain
    local missing = "CAST(extract(epoch FROM resumes_at - covered_through) / " .. (seconds or "") .. " AS BIGINT) - 1"
    if minutes ~= nil then
      bucket = "date_trunc('hour', " .. c .. ") + CAST(CAST(CAST(floor(extract(minute FROM " .. c .. ") / " .. minutes .. ") AS INTEGER) * " .. minutes .. " AS VARCHAR) || ' minutes' AS INTERVAL)"
      step = minutes .. " minutes"
    elseif grain == "week" then
      step = "7 days"
    elseif grain == "month" then
      missing = "CAST((extract(year FROM resumes_at) - extract(year FROM covered_through)) * 12 + extract(month FROM resumes_at) - extract(month FROM covered_through) AS BIGINT) - 1"
    end
    return "SELECT covered_through, resumes_at, " .. missing .. " AS missing FROM ("
      .. "SELECT lag(b) OVER (ORDER BY b) AS covered_through, b AS resumes_at FROM ("
      .. "SELECT DISTINCT CAST(" .. bucket .. " AS TIMESTAMP) AS b FROM ("
      .. "SELECT DISTINCT " .. c .. " FROM " .. self .. " WHERE " .. c .. " IS NOT NULL) AS v) AS d) AS steps"
      .. " WHERE covered_through IS NOT NULL AND resumes_at > covered_through + INTERVAL '" .. step .. "'"
      .. " ORDER BY covered_through"
  end,
}

define_audit {
  name = "relationships",
  params = { "column", "to" },
  optional = { "field" },
  description = "rows whose key (every key column not NULL) has no row with that key in the model `to` (`field`, default the same column names)",
  query = function(self, args)
    local function names(name, v)
      if type(v) == "string" then return { v } end
      if type(v) ~= "table" or #v == 0 then error("`" .. name .. "` must be a column name or a non-empty list of them", 0) end
      return v
    end
    local columns = names("column", args.column)
    local fields = args.field == nil and columns or names("field", args.field)
    if #fields ~= #columns then error("`field` must name as many columns as `column` (" .. #columns .. ")", 0) end
    local present, matched = {}, {}
    for i, c in ipairs(columns) do
      local ci = ident(text("column", c))
      present[i] = "child." .. ci .. " IS NOT NULL"
      matched[i] = "parent." .. ident(text("field", fields[i])) .. " = child." .. ci
    end
    return "SELECT * FROM " .. self .. " AS child WHERE " .. table.concat(present, " AND ")
      .. " AND NOT EXISTS (SELECT 1 FROM " .. ref(text("to", args.to)) .. " AS parent WHERE " .. table.concat(matched, " AND ") .. ")"
  end,
}
