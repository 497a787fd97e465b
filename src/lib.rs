pub mod tach;
pub mod export;
