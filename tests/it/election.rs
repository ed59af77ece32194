//! Leader election on real masters. The engine's own tests (the term on every master, the
//! proclamation script, observers fed by the channel) are in `engine`.

mod engine;
