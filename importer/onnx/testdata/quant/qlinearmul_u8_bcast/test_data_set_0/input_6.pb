BcsJ
co<