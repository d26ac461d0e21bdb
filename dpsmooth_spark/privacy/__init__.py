"""Privacy primitives: noise samplers, sensitivities and the budget accountant."""
