pub mod tach;
pub mod export;
pub mod query;
