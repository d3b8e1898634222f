"""Files copied, read-only, into every verification job; they import nothing from tempering."""
