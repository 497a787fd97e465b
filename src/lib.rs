pub mod export;
pub mod tach;
