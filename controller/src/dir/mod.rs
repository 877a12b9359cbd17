pub mod store; pub mod parse; pub mod state; pub mod watch;
