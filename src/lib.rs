pub mod tach;
