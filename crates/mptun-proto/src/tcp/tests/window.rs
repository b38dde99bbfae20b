use super::seg::*;
