"""Moving memory out of and into obsmem: export, import, and readers of other systems' stores."""
