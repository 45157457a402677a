ByzJ
