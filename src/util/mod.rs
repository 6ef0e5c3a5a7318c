//! Small pieces every layer may use: the seeded generator, the cancel token
//! background work shares, and the user's folders. Imports nothing of the
//! crate's own.

pub mod cancel;
pub mod paths;
pub mod rng;
pub mod text;

pub use cancel::CancelToken;
pub use rng::Rng;
