// placeholder until the format module lands
