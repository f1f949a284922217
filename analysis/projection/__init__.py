"""What more devices would give: the scaling model, its inputs, its formulas, its words and the missing speed-up."""
