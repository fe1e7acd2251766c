"""``observability.skupper.io/v2alpha1`` NetworkObserver: upstream's network-observer chart as a resource, deployed
by the site controller's process (:mod:`.controller`) from checked values (:mod:`.values`) and composed objects
(:mod:`.compose`)."""
