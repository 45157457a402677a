BxsJ+
§<