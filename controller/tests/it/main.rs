//! The controller library's tests, one binary: the folder store's properties and the
//! real kube-apiserver the cluster tests start.
//!
//! One binary links the crate's dependencies once; its tests run in parallel
//! threads (see docs/testing.md for the groups that must not).

mod dir_proptest;
mod envtest_smoke;
