//! Rhai values → the neutral JSON spec the builder reads.

use super::Handle;
use ::rhai::{Array, Dynamic, FnPtr, ImmutableString, Map};
use serde_json::Value as J;

/// Deepest nesting accepted in a spec value.
const MAX_DEPTH: usize = 32;

/// Converts a spec value: `()` → null, booleans, integers, finite floats, strings and chars,
/// arrays, maps (in key order), and model handles (→ their name).
///
/// # Errors
/// A message naming what cannot appear in a spec (a closure, another type, a non-finite float,
/// nesting deeper than 32).
pub(super) fn to_json(v: &Dynamic) -> Result<J, String> {
    convert(v, 0)
}

fn convert(v: &Dynamic, depth: usize) -> Result<J, String> {
    if depth > MAX_DEPTH {
        return Err("value nested too deeply".into());
    }
    if v.is_unit() {
        return Ok(J::Null);
    }
    if let Ok(b) = v.as_bool() {
        return Ok(J::Bool(b));
    }
    if let Ok(i) = v.as_int() {
        return Ok(J::from(i));
    }
    if let Ok(f) = v.as_float() {
        return serde_json::Number::from_f64(f).map(J::Number).ok_or_else(|| "a number must be finite".into());
    }
    if let Ok(c) = v.as_char() {
        return Ok(J::String(c.to_string()));
    }
    if let Some(s) = v.read_lock::<ImmutableString>() {
        return Ok(J::String(s.to_string()));
    }
    if let Some(items) = v.read_lock::<Array>() {
        return items.iter().map(|i| convert(i, depth + 1)).collect::<Result<Vec<_>, _>>().map(J::Array);
    }
    if let Some(map) = v.read_lock::<Map>() {
        let mut out = serde_json::Map::new();
        for (k, val) in map.iter() {
            out.insert(k.to_string(), convert(val, depth + 1)?);
        }
        return Ok(J::Object(out));
    }
    if let Some(h) = v.read_lock::<Handle>() {
        return Ok(J::String(h.0.to_string()));
    }
    if v.read_lock::<FnPtr>().is_some() {
        return Err("a closure is not allowed here".into());
    }
    Err(format!("unsupported value of type `{}`", v.type_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_plain_values_in_key_order() {
        let mut m = Map::new();
        m.insert("b".into(), Dynamic::from(2_i64));
        m.insert("a".into(), Dynamic::from(vec![Dynamic::from("x"), Dynamic::from(1.5_f64), Dynamic::UNIT, Dynamic::from(true)]));
        let j = to_json(&Dynamic::from(m)).unwrap();
        assert_eq!(j.to_string(), r#"{"a":["x",1.5,null,true],"b":2}"#);
    }

    #[test]
    fn rejects_non_finite_and_deep_values() {
        assert!(to_json(&Dynamic::from(f64::NAN)).unwrap_err().contains("finite"));
        let mut v = Dynamic::from(1_i64);
        for _ in 0..40 {
            v = Dynamic::from(vec![v]);
        }
        assert!(to_json(&v).unwrap_err().contains("too deeply"));
    }
}
