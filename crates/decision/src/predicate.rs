//! Rule predicates: `all` / `any` / `not` over comparison leaves, with three-valued logic.
//!
//! # Truth
//!
//! - A path that does not resolve (or resolves to JSON `null`) is **unknown**; `exists` answers
//!   it with true/false instead.
//! - `eq` / `ne` compare numbers numerically (1 equals 1.0) and everything else structurally.
//! - `lt` / `lte` / `gt` / `gte` need two finite numbers or two strings; anything else is unknown.
//! - `all`: any false → false, else any unknown → unknown, else true. `any`: any true → true,
//!   else any unknown → unknown, else false. `not unknown` is unknown.
//! - Only a **true** predicate matches a rule.

use std::cmp::Ordering;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A predicate tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Predicate {
    All { all: Vec<Predicate> },
    Any { any: Vec<Predicate> },
    Not { not: Box<Predicate> },
    Leaf(Leaf),
}

/// A comparison.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Leaf {
    pub op: Op,
    pub left: Operand,
    #[serde(default)]
    pub right: Option<Value>,
}

/// Comparison operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Lte,
    Gt,
    Gte,
    Exists,
}

/// Where the left side of a comparison comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Operand {
    /// A JSON Pointer into the invocation input.
    Input { pointer: String },
    /// A JSON Pointer into an alias's DecisionResult spec (`/value`, `/status`, …).
    Decision { alias: String, pointer: String },
}

/// Three-valued truth.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Truth {
    True,
    False,
    Unknown,
}

impl From<bool> for Truth {
    fn from(value: bool) -> Self {
        if value {
            Truth::True
        } else {
            Truth::False
        }
    }
}

/// Resolves operands against the input and the evaluation results.
pub trait Resolve {
    /// The value at `pointer` in the input, if any.
    fn input(&self, pointer: &str) -> Option<&Value>;
    /// The value at `pointer` in `alias`'s result spec, if any.
    fn decision(&self, alias: &str, pointer: &str) -> Option<Value>;
}

impl Predicate {
    /// Evaluates the predicate.
    pub fn eval(&self, resolve: &impl Resolve) -> Truth {
        match self {
            Predicate::All { all } => {
                let mut unknown = false;
                for p in all {
                    match p.eval(resolve) {
                        Truth::False => return Truth::False,
                        Truth::Unknown => unknown = true,
                        Truth::True => {}
                    }
                }
                if unknown {
                    Truth::Unknown
                } else {
                    Truth::True
                }
            }
            Predicate::Any { any } => {
                let mut unknown = false;
                for p in any {
                    match p.eval(resolve) {
                        Truth::True => return Truth::True,
                        Truth::Unknown => unknown = true,
                        Truth::False => {}
                    }
                }
                if unknown {
                    Truth::Unknown
                } else {
                    Truth::False
                }
            }
            Predicate::Not { not } => match not.eval(resolve) {
                Truth::True => Truth::False,
                Truth::False => Truth::True,
                Truth::Unknown => Truth::Unknown,
            },
            Predicate::Leaf(leaf) => leaf.eval(resolve),
        }
    }

    /// Every alias the predicate reads.
    pub fn aliases(&self) -> Vec<&str> {
        let mut out = Vec::new();
        self.collect_aliases(&mut out);
        out
    }

    fn collect_aliases<'a>(&'a self, out: &mut Vec<&'a str>) {
        match self {
            Predicate::All { all: list } | Predicate::Any { any: list } => {
                for p in list {
                    p.collect_aliases(out);
                }
            }
            Predicate::Not { not } => not.collect_aliases(out),
            Predicate::Leaf(Leaf {
                left: Operand::Decision { alias, .. },
                ..
            }) => out.push(alias),
            Predicate::Leaf(_) => {}
        }
    }
}

impl Leaf {
    fn eval(&self, resolve: &impl Resolve) -> Truth {
        let left = match &self.left {
            Operand::Input { pointer } => resolve.input(pointer).cloned(),
            Operand::Decision { alias, pointer } => resolve.decision(alias, pointer),
        }
        .filter(|v| !v.is_null());
        if self.op == Op::Exists {
            return left.is_some().into();
        }
        let (Some(left), Some(right)) = (left, self.right.as_ref().filter(|v| !v.is_null())) else {
            return Truth::Unknown;
        };
        match self.op {
            Op::Eq => equal(&left, right).into(),
            Op::Ne => (!equal(&left, right)).into(),
            Op::Lt | Op::Lte | Op::Gt | Op::Gte => match order(&left, right) {
                None => Truth::Unknown,
                Some(ordering) => match self.op {
                    Op::Lt => ordering == Ordering::Less,
                    Op::Lte => ordering != Ordering::Greater,
                    Op::Gt => ordering == Ordering::Greater,
                    _ => ordering != Ordering::Less,
                }
                .into(),
            },
            Op::Exists => Truth::True,
        }
    }
}

fn equal(left: &Value, right: &Value) -> bool {
    match (left.as_f64(), right.as_f64()) {
        (Some(a), Some(b)) if left.is_number() && right.is_number() => a == b,
        _ => left == right,
    }
}

fn order(left: &Value, right: &Value) -> Option<Ordering> {
    match (left, right) {
        (Value::Number(a), Value::Number(b)) => {
            let (a, b) = (a.as_f64()?, b.as_f64()?);
            if a.is_finite() && b.is_finite() {
                a.partial_cmp(&b)
            } else {
                None
            }
        }
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Fixed(Value);

    impl Resolve for Fixed {
        fn input(&self, pointer: &str) -> Option<&Value> {
            self.0.pointer(pointer)
        }
        fn decision(&self, _alias: &str, _pointer: &str) -> Option<Value> {
            None
        }
    }

    fn p(value: Value) -> Predicate {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn three_valued_logic() {
        let input = Fixed(json!({"n": 3, "s": "b"}));
        let known = json!({"op": "gte", "left": {"source": "input", "pointer": "/n"}, "right": 3});
        let missing =
            json!({"op": "eq", "left": {"source": "input", "pointer": "/missing"}, "right": 1});
        let mixed = json!({"op": "lt", "left": {"source": "input", "pointer": "/s"}, "right": 1});
        assert_eq!(p(known.clone()).eval(&input), Truth::True);
        assert_eq!(p(missing.clone()).eval(&input), Truth::Unknown);
        assert_eq!(p(mixed).eval(&input), Truth::Unknown);
        assert_eq!(
            p(json!({"all": [known.clone(), missing.clone()]})).eval(&input),
            Truth::Unknown
        );
        assert_eq!(
            p(json!({"any": [known.clone(), missing.clone()]})).eval(&input),
            Truth::True
        );
        assert_eq!(
            p(json!({"not": missing.clone()})).eval(&input),
            Truth::Unknown
        );
        let exists = json!({"op": "exists", "left": {"source": "input", "pointer": "/missing"}});
        assert_eq!(p(exists).eval(&input), Truth::False);
        let float_eq =
            json!({"op": "eq", "left": {"source": "input", "pointer": "/n"}, "right": 3.0});
        assert_eq!(p(float_eq).eval(&input), Truth::True);
    }
}
