BxzJ
