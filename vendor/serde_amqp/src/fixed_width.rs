//! Widths of types

// /// Width of format code
// pub(crate) const FORMAT_CODE_WIDTH: usize = 1;

// ///(crate) Width of Null format code
// pub(crate) const NULL_WIDTH: usize = 0;
// pub(crate) const BOOLEAN_WIDTH: usize = 0;
// pub(crate) const BOOLEAN_VAR_WIDTH: usize = 1;
// pub(crate) const ZERO_WIDTH: usize = 0;
// pub(crate) const UBYTE_WIDTH: usize = 1;
// pub(crate) const USHORT_WIDTH: usize = 2;
// pub(crate) const UINT_WIDTH: usize = 4;
// pub(crate) const ULONG_WIDTH: usize = 8;
// pub(crate) const ULONG0_WIDTH: usize = 0;
// pub(crate) const SMALL_ULONG_WIDTH: usize = 1;
// pub(crate) const BYTE_WIDTH: usize = 1;
// pub(crate) const SHORT_WIDTH: usize = 2;
// pub(crate) const INT_WIDTH: usize = 4;
// pub(crate) const LONG_WIDTH: usize = 8;
// pub(crate) const FLOAT_WIDTH: usize = 4;
// pub(crate) const DOUBLE_WIDTH: usize = 8;
pub(crate) const DECIMAL32_WIDTH: usize = 4;
pub(crate) const DECIMAL64_WIDTH: usize = 8;
pub(crate) const DECIMAL128_WIDTH: usize = 16;
// pub(crate) const CHAR_WIDTH: usize = 4;
// pub(crate) const TIMESTAMP_WIDTH: usize = 8;
pub(crate) const UUID_WIDTH: usize = 16;
