//! Privacy accounting: the session budget and the durable ledger of charges.

pub mod amount;
pub mod budget;
pub mod ledger;
pub mod measure;
