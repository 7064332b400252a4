//! ToolClad-format manifests (placeholder, filled next).
