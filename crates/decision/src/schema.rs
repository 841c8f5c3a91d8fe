//! JSON Schema (2020-12) validation of inputs, projections and outcomes.
//!
//! Schemas are compiled once per invocation with the `jsonschema` crate, built without remote
//! or file resolvers: only local `$ref`s resolve, and a schema that needs anything else fails
//! to compile (`invalid-definition`).

use serde_json::Value;

/// A compiled schema.
pub struct Schema {
    validator: jsonschema::Validator,
}

impl std::fmt::Debug for Schema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Schema").finish_non_exhaustive()
    }
}

/// A schema that does not compile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid JSON Schema: {0}")]
pub struct SchemaError(pub String);

impl Schema {
    /// Compiles a JSON Schema 2020-12 document.
    pub fn compile(schema: &Value) -> Result<Self, SchemaError> {
        jsonschema::draft202012::new(schema)
            .map(|validator| Schema { validator })
            .map_err(|e| SchemaError(e.to_string()))
    }

    /// The first violation, if any, as "pointer: message" (the instance path and the rule; the
    /// offending value itself is not copied).
    pub fn violation(&self, instance: &Value) -> Option<String> {
        self.validator
            .iter_errors(instance)
            .next()
            .map(|error| format!("{}: fails {}", error.instance_path(), error.schema_path()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn validates_and_refuses_remote_refs() {
        let schema = Schema::compile(&json!({"type": "object", "required": ["message"]})).unwrap();
        assert!(schema.violation(&json!({"message": "x"})).is_none());
        assert!(schema.violation(&json!({})).is_some());
        let local =
            Schema::compile(&json!({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s"}))
                .unwrap();
        assert!(local.violation(&json!("x")).is_none());
        assert!(Schema::compile(&json!({"$ref": "https://example.invalid/schema.json"})).is_err());
    }
}
