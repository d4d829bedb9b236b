"""An NQM fitted to a trained network: Hessian spectrum, gradient noise along its eigenvectors, the power-law tail and the fitted configuration."""
