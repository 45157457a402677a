BrJ$ntqmzep—sªõI'Ö^9Y»¡Á1
ÃŽêÙ[µa·P­