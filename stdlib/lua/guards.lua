-- efmesh Lua guards: run once on the interpreter's own library tables before any model file.
--
-- Some library functions loop inside C, where the instruction hook that enforces the time
-- budget never fires; others install finalizers that run with hooks off. These wrappers bound
-- them with clear errors. Because the string metatable is locked afterwards, method calls such
-- as ("x"):rep(n) reach these same wrapped functions. `...` is the limits table.
local limits = ...
local string, table, type, error, select, tostring = string, table, type, error, select, tostring
local floor = math.floor

local rep = string.rep
string.rep = function(s, n, sep)
  s = tostring(s)
  if type(n) ~= "number" then return rep(s, n, sep) end
  local size = #s * n + (sep and #tostring(sep) * (n - 1) or 0)
  if size > limits.max_string then
    error(("string.rep would build a %d-byte string (limit %d bytes)"):format(floor(size), limits.max_string), 2)
  end
  return rep(s, n, sep)
end

local move = table.move
table.move = function(a1, f, e, t, a2)
  if type(f) == "number" and type(e) == "number" and e - f + 1 > limits.max_table_move then
    error(("table.move of %d elements (limit %d)"):format(floor(e - f + 1), limits.max_table_move), 2)
  end
  return move(a1, f, e, t, a2)
end

-- Lua patterns backtrack inside C. Bound the worst case: subject length ^ (quantifiers + 1).
local function quantifiers(p)
  local n, i = 0, 1
  while i <= #p do
    local c = p:sub(i, i)
    if c == "%" then
      i = i + 2
    else
      if c == "*" or c == "+" or c == "-" then n = n + 1 end
      i = i + 1
    end
  end
  return n
end
local function guard(name, f)
  string[name] = function(s, p, ...)
    if type(s) == "string" and type(p) == "string" then
      local q = quantifiers(p)
      local cost = (#s + 1) ^ (q + 1)
      if cost > limits.max_pattern_cost then
        error(("string.%s: pattern `%s` may backtrack too long on a %d-byte string; simplify it"):format(name, p, #s), 2)
      end
    end
    return f(s, p, ...)
  end
end
for _, name in ipairs({ "find", "match", "gmatch", "gsub" }) do
  guard(name, string[name])
end
