//! Values at up to three dotted JSON paths, found in one walk of a message: a serde visitor
//! descends only into the members on a path and skips the rest (`IgnoredAny`) — no `Value`
//! tree, no allocation for plain keys and values, whatever the message's size. Read by feeds
//! (timestamp, sequence, filter) and by a described wire's replies (id, status).
use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A value found at a path.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) enum Found<'de> {
    /// Not in the message.
    #[default]
    Missing,
    /// A whole number, 0 or more.
    Int(u64),
    /// Any other number.
    Float(f64),
    /// A string.
    Text(Cow<'de, str>),
    /// `null`.
    Null,
    /// Anything else: a negative number, a bool, an object, an array.
    Other,
}

/// The values at `paths` (each a list of member names; an empty one finds nothing) in the
/// JSON `payload`; `Err` when it is not JSON.
pub(crate) fn find<'de>(
    payload: &'de [u8],
    paths: &[&[String]; 3],
) -> Result<[Found<'de>; 3], serde_json::Error> {
    let mut found: [Found<'de>; 3] = Default::default();
    let mut de = serde_json::Deserializer::from_slice(payload);
    Walk {
        paths,
        active: 0b111,
        depth: 0,
        found: &mut found,
    }
    .deserialize(&mut de)?;
    Ok(found)
}

/// One level of the walk: the paths still followed (`active`, a bit per path) at `depth`.
struct Walk<'a, 'de> {
    paths: &'a [&'a [String]; 3],
    active: u8,
    depth: usize,
    found: &'a mut [Found<'de>; 3],
}

impl<'de> DeserializeSeed<'de> for Walk<'_, 'de> {
    type Value = ();

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let Walk {
            paths,
            active,
            depth,
            found,
        } = self;
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let mut here = 0u8; // paths that end at this member
            let mut deeper = 0u8; // paths that go on inside it
            for (i, path) in paths.iter().enumerate() {
                if active & (1 << i) != 0 && path.get(depth).is_some_and(|p| *p == *key) {
                    if path.len() == depth + 1 {
                        here |= 1 << i;
                    } else {
                        deeper |= 1 << i;
                    }
                }
            }
            if here != 0 {
                let value = map.next_value::<Scalar<'de>>()?.0;
                for (i, slot) in found.iter_mut().enumerate() {
                    if here & (1 << i) != 0 {
                        *slot = value.clone();
                    }
                }
            } else if deeper != 0 {
                map.next_value_seed(Walk {
                    paths,
                    active: deeper,
                    depth: depth + 1,
                    found: &mut *found,
                })?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    // Anything else holds none of the paths: skipped.
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }
}

/// The value at the end of a path.
struct Scalar<'de>(Found<'de>);

impl<'de> serde::Deserialize<'de> for Scalar<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarVisitor)
    }
}

struct ScalarVisitor;

impl<'de> Visitor<'de> for ScalarVisitor {
    type Value = Scalar<'de>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a number or a string")
    }
    fn visit_u64<E>(self, v: u64) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Int(v)))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Scalar<'de>, E> {
        Ok(Scalar(if v >= 0 {
            Found::Int(v as u64)
        } else {
            Found::Other
        }))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Float(v)))
    }
    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Text(Cow::Borrowed(v))))
    }
    fn visit_str<E>(self, v: &str) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Text(Cow::Owned(v.to_string()))))
    }
    fn visit_bool<E>(self, _: bool) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Other))
    }
    fn visit_unit<E>(self) -> Result<Scalar<'de>, E> {
        Ok(Scalar(Found::Null))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Scalar<'de>, A::Error> {
        while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
        Ok(Scalar(Found::Other))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Scalar<'de>, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(Scalar(Found::Other))
    }
}
