//! The model server's tests, one binary: the `agentplane-model-server` binary as a
//! person runs it (its routes and script are unit-tested beside them).

mod binary;
