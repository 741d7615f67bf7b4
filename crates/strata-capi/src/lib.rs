//! strata-capi
