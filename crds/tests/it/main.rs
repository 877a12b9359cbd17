//! The resource types' tests, one binary: the committed CRD YAML against the types.
//!
//! One binary links the crate's dependencies once; its tests run in parallel
//! threads (see docs/testing.md for the groups that must not).

mod crds;
