//! JSON with every number as written. A `serde_json::Value` holds an integer past 64 bits or a
//! long decimal as the nearest double (`12345678901234567.89` becomes `12345678901234568`); a
//! seed's values must reach the engine's cast with every digit, so a seed's JSON is read as
//! [`Json`] instead, numbers kept as their text.

use serde_json::value::RawValue;

/// A JSON value whose numbers are the text the document spells them with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Json {
    /// `null`.
    Null,
    /// `true` or `false`.
    Bool(bool),
    /// The number's text, as written (`1E2`, `0.10`, `123456789012345678901234567890`).
    Number(String),
    /// A string, unescaped.
    String(String),
    /// An array's elements.
    Array(Vec<Json>),
    /// Members in the document's order, a key given twice kept twice.
    Object(Vec<(String, Json)>),
}

/// An array's elements or an object's members, each as its raw text.
enum Items<'a> {
    Seq(Vec<&'a RawValue>),
    Map(Vec<(String, &'a RawValue)>),
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for Items<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for V<'a> {
            type Value = Items<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array or an object")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Items<'a>, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<&'de RawValue>()? {
                    items.push(item);
                }
                Ok(Items::Seq(items))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Items<'a>, A::Error> {
                let mut members = Vec::new();
                while let Some(key) = map.next_key::<String>()? {
                    members.push((key, map.next_value::<&'de RawValue>()?));
                }
                Ok(Items::Map(members))
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

impl Json {
    /// One JSON document.
    ///
    /// # Errors
    /// serde_json's, when `text` is not one JSON value.
    pub fn parse(text: &str) -> Result<Json, serde_json::Error> {
        let raw: &RawValue = serde_json::from_str(text)?;
        Self::of(raw)
    }

    fn of(raw: &RawValue) -> Result<Json, serde_json::Error> {
        let text = raw.get();
        Ok(match text.as_bytes().first() {
            Some(b'n') => Json::Null,
            Some(b't') => Json::Bool(true),
            Some(b'f') => Json::Bool(false),
            Some(b'"') => Json::String(serde_json::from_str(text)?),
            Some(b'[' | b'{') => match serde_json::from_str::<Items>(text)? {
                Items::Seq(items) => Json::Array(items.into_iter().map(Self::of).collect::<Result<_, _>>()?),
                Items::Map(members) => Json::Object(members.into_iter().map(|(k, v)| Ok((k, Self::of(v)?))).collect::<Result<_, serde_json::Error>>()?),
            },
            _ => Json::Number(text.to_string()),
        })
    }

    /// The value as compact JSON text: `serde_json::Value`'s spelling (strings escaped alike, no
    /// spaces), numbers as written.
    #[must_use]
    pub fn compact(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Json::Null => out.push_str("null"),
            Json::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
            Json::Number(t) => out.push_str(t),
            Json::String(s) => out.push_str(&quoted(s)),
            Json::Array(items) => {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    item.write(out);
                }
                out.push(']');
            }
            Json::Object(members) => {
                out.push('{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&quoted(k));
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
        }
    }
}

fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_digits_and_the_rest_reads_as_serde_json_writes_it() {
        let text = r#" [123456789012345678901234567890, 12345678901234567.89, -1E2, 0.10, "a \"q\" é\u00e9",
            null, true, {"k": [1, {"x": false}], "k": 2}] "#;
        let j = Json::parse(text).unwrap();
        assert_eq!(j.compact(), r#"[123456789012345678901234567890,12345678901234567.89,-1E2,0.10,"a \"q\" éé",null,true,{"k":[1,{"x":false}],"k":2}]"#);
        // Without numbers written differently, the text is serde_json's own.
        let plain = r#"{"a": [1, 2.5, "x\ny", null], "b": {"c": true}}"#;
        assert_eq!(Json::parse(plain).unwrap().compact(), serde_json::from_str::<serde_json::Value>(plain).unwrap().to_string());
        assert!(Json::parse("[1,").is_err());
        assert!(Json::parse("1 2").is_err());
    }
}
