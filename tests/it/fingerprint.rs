//! Golden tests (placeholder).
