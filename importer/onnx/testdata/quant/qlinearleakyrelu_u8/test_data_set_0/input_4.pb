ByzJ
