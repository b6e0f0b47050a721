pub use larch_engine::*;
