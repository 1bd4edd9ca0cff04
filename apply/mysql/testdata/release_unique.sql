UPDATE `people` SET `email` = NULL, `a` = NULL
WHERE (`id` = 1 AND NOT (`email` <=> 'x@x' AND `a` <=> 1))
 OR (`id` = 2 AND NOT (`email` <=> NULL AND `a` <=> 2))
