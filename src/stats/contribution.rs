//! How much one person can contribute to a DP aggregate's input: the stability bound the
//! calibration needs.
//!
//! Under replace-one neighbours a person's rows are replaced by other rows. If each person
//! adds at most `rows` rows to each of at most `groups` groups of the aggregated input, a count
//! changes by at most `rows` in each of at most `2·groups` groups (the rows leave `groups`
//! groups and join `groups` others), and the calibration splits ε over the groups. This is the
//! stability of the transformations below the aggregate (OpenDP's stability maps; ZetaSQL's
//! `max_rows_contributed` and `max_groups_contributed`). The SQL layer derives it from the plan
//! (`crate::sql::privacy::plan::analysis`) and every calibration reads it from there.

/// At most `rows` rows in each of at most `groups` groups per person.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Contribution {
    pub rows: u32,
    pub groups: u32,
}

impl Contribution {
    /// One row in one group: a table protected row by row, read by a plan that cannot
    /// repeat a row.
    pub const ONE_ROW: Self = Self { rows: 1, groups: 1 };
}

impl Default for Contribution {
    fn default() -> Self {
        Self::ONE_ROW
    }
}

impl std::fmt::Display for Contribution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<= {} row{} in <= {} group{} per person",
            self.rows,
            if self.rows == 1 { "" } else { "s" },
            self.groups,
            if self.groups == 1 { "" } else { "s" }
        )
    }
}
