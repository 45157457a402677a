BazJ
