//! DCS contract suite.
